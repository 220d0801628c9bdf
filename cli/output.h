// Text output helpers of `kjit`: aligned tables, byte counts, times. JSON: json.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::cli {

// Prints a table with a header row, columns padded to their widest cell; numeric-looking cells
// are right-aligned.
void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

std::string HumanBytes(uint64_t bytes);  // "1.5 MiB"
std::string UnixTime(int64_t t);         // "2026-11-29 10:45:00Z"

}  // namespace kjit::cli
