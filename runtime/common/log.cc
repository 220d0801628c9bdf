#include "runtime/common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
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
  std::string line;
  line.reserve(message.size());
  for (const char c : message) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      line += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      line += "\\x";
      line += kHex[u >> 4];
      line += kHex[u & 15];
    } else {
      line += c;
    }
  }
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "%s %s: %s\n", Program().c_str(), kNames[static_cast<int>(level)], line.c_str());
  std::fflush(stderr);
}

void LogRateLimited(LogLevel level, std::string_view topic, const std::string& message) {
  if (!LogEnabled(level)) return;
  struct Seen {
    std::chrono::steady_clock::time_point last;
    uint64_t held = 0;
  };
  static std::mutex mu;
  static auto* const seen = new std::map<std::string, Seen, std::less<>>();
  const auto now = std::chrono::steady_clock::now();
  uint64_t held = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = seen->find(topic);
    if (it == seen->end()) {
      if (seen->size() >= 4096) seen->clear();  // bounded: topics come from code, not clients
      it = seen->emplace(std::string(topic), Seen{now - std::chrono::hours(1), 0}).first;
    }
    if (now - it->second.last < std::chrono::seconds(10)) {
      ++it->second.held;
      return;
    }
    held = it->second.held;
    it->second = Seen{now, 0};
  }
  Log(level, held == 0 ? message
                       : message + " (" + std::to_string(held) + " more like it in the last 10 s not shown)");
}

}  // namespace kjit
