#include "cli/output.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace kjit::cli {

void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  std::vector<bool> numeric(header.size(), !rows.empty());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
      const bool num = !r[c].empty() && r[c].find_first_not_of("0123456789./-") == std::string::npos;
      numeric[c] = numeric[c] && num;
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const int w = static_cast<int>(width[c]);
      out += numeric[c] ? absl::StrFormat("%*s", w, cell) : absl::StrFormat("%-*s", w, cell);
      if (c + 1 < width.size()) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::puts(out.c_str());
  };
  line(header);
  for (const auto& r : rows) line(r);
}

std::string HumanBytes(uint64_t b) {
  if (b < 1024) return absl::StrFormat("%d B", b);
  if (b < (1u << 20)) return absl::StrFormat("%.1f KiB", b / 1024.0);
  if (b < (1u << 30)) return absl::StrFormat("%.1f MiB", b / 1048576.0);
  return absl::StrFormat("%.2f GiB", b / 1073741824.0);
}

std::string UnixTime(int64_t t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ", absl::FromUnixSeconds(t), absl::UTCTimeZone());
}

}  // namespace kjit::cli
