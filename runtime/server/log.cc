#include "runtime/server/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace kjit::server {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;
}  // namespace

void SetLogLevel(const std::string& level) {
  const LogLevel l = level == "error" ? LogLevel::kError
                     : level == "warn" ? LogLevel::kWarn
                     : level == "debug" ? LogLevel::kDebug : LogLevel::kInfo;
  g_level.store(static_cast<int>(l));
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(); }

void Log(LogLevel level, const std::string& message) {
  if (!LogEnabled(level)) return;
  static const char* const kNames[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "kjitd %s: %s\n", kNames[static_cast<int>(level)], message.c_str());
  std::fflush(stderr);
}

}  // namespace kjit::server
