#include "runtime/common/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace kjit {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;
std::string& Program() {
  static std::string* const program = new std::string("kjitd");
  return *program;
}
}  // namespace

void SetLogLevel(const std::string& level) {
  const LogLevel l = level == "error" ? LogLevel::kError
                     : level == "warn" ? LogLevel::kWarn
                     : level == "debug" ? LogLevel::kDebug : LogLevel::kInfo;
  g_level.store(static_cast<int>(l));
}

void SetLogProgram(std::string_view program) {
  std::lock_guard<std::mutex> lock(g_mu);
  Program() = std::string(program);
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(); }

void Log(LogLevel level, const std::string& message) {
  if (!LogEnabled(level)) return;
  static const char* const kNames[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "%s %s: %s\n", Program().c_str(), kNames[static_cast<int>(level)], message.c_str());
  std::fflush(stderr);
}

}  // namespace kjit
