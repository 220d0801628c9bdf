// Output helpers of `kjit`: aligned text tables and JSON (through protobuf's Struct/Value, so the
// JSON encoding is a maintained library's).
#pragma once

#include <google/protobuf/struct.pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::cli {

using Json = google::protobuf::Value;

Json JsonString(const std::string& s);
Json JsonNumber(double v);
Json JsonBool(bool v);
Json JsonList(std::vector<Json> items);
// A JSON object from (name, value) pairs.
Json JsonObject(std::vector<std::pair<std::string, Json>> fields);

// Prints one JSON document and a newline to stdout.
void PrintJson(const Json& v);

// Prints a table with a header row, columns padded to their widest cell; numeric-looking cells
// are right-aligned.
void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

std::string HumanBytes(uint64_t bytes);  // "1.5 MiB"
std::string UnixTime(int64_t t);         // "2026-11-29 10:45:00Z"

}  // namespace kjit::cli
