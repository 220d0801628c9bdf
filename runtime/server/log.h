// Minimal leveled logging to stderr (the daemon's supervisor collects it).
#pragma once

#include <string>

namespace kjit::server {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(const std::string& level);  // "error", "warn", "info", "debug"
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string& message);

}  // namespace kjit::server
