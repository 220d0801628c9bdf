#include "cli/json.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace kjit::cli {
namespace {

// %.15g when that reads back exactly, else %.17g: the shortest of the two that round-trips.
std::string NumberText(double d) {
  if (std::isnan(d)) return "\"NaN\"";
  if (std::isinf(d)) return d > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", d);
  if (std::strtod(buf, nullptr) != d) std::snprintf(buf, sizeof(buf), "%.17g", d);
  return buf;
}

// Code points written as escapes although JSON allows them raw: HTML's '<' and '>', controls, and
// characters that render as nothing (soft hyphen, zero-width and bidirectional marks, BOM, tags).
bool EscapedCodePoint(uint32_t c) {
  return c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || (c >= 0x7f && c <= 0x9f) ||
         c == 0xad || (c >= 0x600 && c <= 0x603) || c == 0x6dd || c == 0x70f || c == 0x17b4 ||
         c == 0x17b5 || (c >= 0x200b && c <= 0x200f) || (c >= 0x2028 && c <= 0x202e) ||
         (c >= 0x2060 && c <= 0x2064) || (c >= 0x206a && c <= 0x206f) || c == 0xfeff ||
         (c >= 0xfff9 && c <= 0xfffb) || (c >= 0x1d173 && c <= 0x1d17a) || c == 0xe0001 ||
         (c >= 0xe0020 && c <= 0xe007f);
}

// The code point of the well-formed UTF-8 sequence at s[i] and its length; length 0 when the bytes
// there are not one (overlong, surrogate, past U+10FFFF, truncated).
uint32_t DecodeUtf8(const std::string& s, size_t i, size_t* len) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  *len = 0;
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  size_t n;
  uint32_t c, min;
  if ((b0 & 0xe0) == 0xc0) {
    n = 2, c = b0 & 0x1f, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    n = 3, c = b0 & 0x0f, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    n = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    c = (c << 6) | (byte(i + k) & 0x3f);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  *len = n;
  return c;
}

// JSON's two-character escapes; null for the others.
const char* ShortEscape(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return nullptr;
  }
}

void AppendEscape(uint32_t unit, std::string& out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(unit));
  out += buf;
}

void AppendString(const std::string& s, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    const uint32_t c = DecodeUtf8(s, i, &len);
    if (len == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
      continue;
    }
    if (!EscapedCodePoint(c)) {
      out.append(s, i, len);
    } else if (const char* short_form = ShortEscape(c)) {
      out += short_form;
    } else if (c > 0xffff) {
      AppendEscape(0xd800 + ((c - 0x10000) >> 10), out);
      AppendEscape(0xdc00 + ((c - 0x10000) & 0x3ff), out);
    } else {
      AppendEscape(c, out);
    }
    i += len;
  }
  out += '"';
}

void Indent(int depth, std::string& out) { out.append(static_cast<size_t>(depth), ' '); }

void Append(const Json& v, int depth, std::string& out) {
  switch (v.type()) {
    case Json::value_t::object: {
      if (v.empty()) {
        out += "{}";
        return;
      }
      out += "{\n";
      bool first = true;
      for (const auto& [name, field] : v.items()) {
        if (!first) out += ",\n";
        first = false;
        Indent(depth + 1, out);
        AppendString(name, out);
        out += ": ";
        Append(field, depth + 1, out);
      }
      out += "\n";
      Indent(depth, out);
      out += "}";
      return;
    }
    case Json::value_t::array: {
      if (v.empty()) {
        out += "[]";
        return;
      }
      out += "[\n";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ",\n";
        Indent(depth + 1, out);
        Append(v[i], depth + 1, out);
      }
      out += "\n";
      Indent(depth, out);
      out += "]";
      return;
    }
    case Json::value_t::string:
      AppendString(v.get_ref<const std::string&>(), out);
      return;
    case Json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      out += NumberText(static_cast<double>(v.get<int64_t>()));
      return;
    case Json::value_t::number_unsigned:
      out += NumberText(static_cast<double>(v.get<uint64_t>()));
      return;
    case Json::value_t::number_float:
      out += NumberText(v.get<double>());
      return;
    default:  // null, discarded, binary: the tool builds none of them
      out += "null";
      return;
  }
}

}  // namespace

std::string JsonText(const Json& value) {
  std::string out;
  Append(value, 0, out);
  return out;
}

void PrintJson(const Json& value) {
  const std::string text = JsonText(value);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputs("\n\n", stdout);
}

}  // namespace kjit::cli
