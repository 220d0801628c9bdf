// Client-supplied text as it may appear in a message or a log line: at most `max_bytes` of it,
// with control characters, quotes, backslashes and non-ASCII bytes escaped (\n, \x1b, ...), so that
// no client can forge a log line, flood a reply with a huge name, or smuggle terminal escapes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kjit {

inline constexpr size_t kClientTextMaxBytes = 96;

// "abc", or for longer text its first max_bytes bytes then "...(N bytes)".
std::string ClientText(std::string_view text, size_t max_bytes = kClientTextMaxBytes);

}  // namespace kjit
