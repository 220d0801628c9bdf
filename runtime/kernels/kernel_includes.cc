// The include closure of a program: which kernel_sources/ files it can read. NVRTC 13 has no
// dependency output (no -MD/-MF), so this is a conservative preprocessing pass of its own.
//
// Only the closure's files are handed to NVRTC, and the cache key covers exactly those, so the key
// always covers every file the compile could read: a closure larger than the real one (directives
// in #if branches NVRTC skips are followed too) only costs a recompile when such a file changes,
// and one missing a file makes NVRTC fail with "cannot open source file", never a stale hit.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/kernels/kernel_sources.h"

namespace kjit::kernels {
namespace {

bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Translation phase 2: a backslash at the end of a line joins it with the next.
std::string SpliceLines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      size_t j = i + 1;
      if (j < text.size() && text[j] == '\r') ++j;
      if (j < text.size() && text[j] == '\n') {
        i = j;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

// A ' that follows a number's digits ("1'000") separates digits; it does not open a character.
bool IsDigitSeparator(const std::string& s, size_t quote) {
  const auto digit = [&](size_t i) { return i < quote && std::isdigit(static_cast<unsigned char>(s[i])); };
  size_t begin = quote;  // the start of the number-like token before the quote
  while (begin > 0 && (IsIdentChar(s[begin - 1]) || s[begin - 1] == '.' || s[begin - 1] == '\'')) --begin;
  return digit(begin) || (begin < quote && s[begin] == '.' && digit(begin + 1));
}

// The raw string's closing sequence when s[quote] opens one (R"delim( after R, u8R, uR, UR or LR).
bool RawStringEnd(const std::string& s, size_t quote, std::string* close) {
  size_t begin = quote;
  while (begin > 0 && IsIdentChar(s[begin - 1])) --begin;
  const std::string prefix = s.substr(begin, quote - begin);
  if (prefix != "R" && prefix != "u8R" && prefix != "uR" && prefix != "UR" && prefix != "LR") return false;
  const size_t open = s.find('(', quote + 1);
  if (open == std::string::npos || open - quote - 1 > 16) return false;
  *close = ")" + s.substr(quote + 1, open - quote - 1) + "\"";
  return true;
}

// Translation phase 3, as far as directives need it: each comment becomes one space (so a
// directive's '#' still has to start its line); string and character literals are kept whole so
// that "//" or "/*" inside one opens nothing. A literal left open ends with its line.
std::string StripComments(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      i = s.find('\n', i);
      if (i == std::string::npos) i = s.size();
      out += ' ';
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const size_t end = s.find("*/", i + 2);
      i = end == std::string::npos ? s.size() : end + 2;
      out += ' ';
    } else if (std::string close; c == '"' && RawStringEnd(s, i, &close)) {
      const size_t end = s.find(close, i + 1);
      const size_t stop = end == std::string::npos ? s.size() : end + close.size();
      out.append(s, i, stop - i);
      i = stop;
    } else if (c == '"' || (c == '\'' && !IsDigitSeparator(s, i))) {
      size_t j = i + 1;
      while (j < s.size() && s[j] != c && s[j] != '\n') j += s[j] == '\\' ? 2 : 1;
      const size_t stop = j < s.size() && s[j] == c ? j + 1 : std::min(j, s.size());
      out.append(s, i, stop - i);
      i = stop;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'; }

// A name NVRTC can match against the headers it is given: it compares names exactly, so only the
// normal form of a relative path (what KernelSource and the embedded table use) ever matches.
bool IsKernelFileName(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path p(name);
  const std::string ext = p.extension().string();
  return !name.empty() && p.is_relative() && p.lexically_normal().generic_string() == name &&
         (ext == ".cu" || ext == ".cuh" || ext == ".h");
}

}  // namespace

IncludeDirectives ScanIncludes(std::string_view text) {
  IncludeDirectives out;
  const std::string clean = StripComments(SpliceLines(text));
  for (size_t line = 0; line < clean.size();) {
    size_t end = clean.find('\n', line);
    if (end == std::string::npos) end = clean.size();
    size_t i = line;
    const auto skip_space = [&] {
      while (i < end && IsSpace(clean[i])) ++i;
    };
    skip_space();
    if (i < end && clean[i] == '#') {
      ++i;
      skip_space();
      size_t word = i;
      while (i < end && IsIdentChar(clean[i])) ++i;
      const std::string_view directive(clean.data() + word, i - word);
      if (directive == "include" || directive == "include_next") {
        skip_space();
        const char open = i < end ? clean[i] : '\0';
        const char close = open == '"' ? '"' : open == '<' ? '>' : '\0';
        const size_t stop = close ? clean.find(close, i + 1) : std::string::npos;
        if (close && stop != std::string::npos && stop < end) {
          out.names.push_back(clean.substr(i + 1, stop - i - 1));
        } else if (i < end) {
          out.computed = true;  // #include MACRO: the name is known only after expansion
        }
      }
    }
    line = end + 1;
  }
  return out;
}

std::vector<nvrtc::Header> IncludedKernelHeaders(std::string_view source) {
  // Angle-bracket names are followed as well: NVRTC looks them up among the headers it is given
  // before the toolkit's include path. A toolkit name (<cuda_bf16.h>) names no file here.
  std::map<std::string, std::string> found;  // name -> content, sorted by name like the key
  std::set<std::string> not_ours;
  std::vector<std::string> pending;
  const auto follow = [&](std::string_view text) {
    IncludeDirectives d = ScanIncludes(text);
    pending.insert(pending.end(), d.names.begin(), d.names.end());
    return !d.computed;
  };
  if (!follow(source)) return AllKernelHeaders();
  while (!pending.empty()) {
    const std::string name = std::move(pending.back());
    pending.pop_back();
    if (found.count(name) || not_ours.count(name)) continue;
    StatusOr<std::string> content = absl::NotFoundError(name);
    if (IsKernelFileName(name)) content = KernelSource(name);
    if (!content.ok()) {  // a toolkit header, or a missing one that NVRTC will report
      not_ours.insert(name);
      continue;
    }
    // A file that names an include through a macro could read any file: give NVRTC all of them.
    if (!follow(*content)) return AllKernelHeaders();
    found.emplace(name, *std::move(content));
  }
  std::vector<nvrtc::Header> out;
  out.reserve(found.size());
  for (auto& [name, content] : found) out.push_back({name, std::move(content)});
  return out;
}

}  // namespace kjit::kernels
