// `kjit ... --json` output. Values are nlohmann::ordered_json, so fields print in the order the
// commands add them. The text keeps the shape scripts already parse (it was protobuf's JSON
// printer's): one-space indentation, every number printed as a double in its shortest round-trip
// form (5, not 5.0), and '<', '>', DEL, C1 controls and invisible Unicode formatting characters
// written as \uXXXX escapes, so names like "f<8, false>" and odd file names stay safe to paste.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace kjit::cli {

using Json = nlohmann::ordered_json;

// The document's text without a trailing newline. Invalid UTF-8 in a string (a file name, say)
// becomes U+FFFD, one per bad byte.
std::string JsonText(const Json& value);

// Prints JsonText, a newline and an empty line to stdout (the tool's output has always ended so).
void PrintJson(const Json& value);

}  // namespace kjit::cli
