// Leveled logging to stderr (the daemon's supervisor, or the client's process, collects it). One
// line per message, prefixed with the program ("kjitd", "kjit") and the level.
#pragma once

#include <string>
#include <string_view>

namespace kjit {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(const std::string& level);  // "error", "warn", "info", "debug"
void SetLogProgram(std::string_view program);  // the prefix; "kjitd" unless set
bool LogEnabled(LogLevel level);
// One line: a newline or other control character in `message` is written escaped (\n, \xNN), so
// no text can forge a line of its own.
void Log(LogLevel level, const std::string& message);
// Log, at most once per `topic` every 10 seconds; the next line that gets through says how many
// were held back. For errors a client can repeat at will.
void LogRateLimited(LogLevel level, std::string_view topic, const std::string& message);

}  // namespace kjit
