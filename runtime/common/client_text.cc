#include "runtime/common/client_text.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace kjit {

std::string ClientText(std::string_view text, size_t max_bytes) {
  const std::string_view shown = text.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size() + 16);
  for (const char c : shown) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\' || c == '\'' || c == '"') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u >= 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  if (shown.size() < text.size()) absl::StrAppend(&out, "...(", text.size(), " bytes)");
  return out;
}

}  // namespace kjit
