// libFuzzer: kjitd's command line. The input, split at NUL bytes, is argv[1..]; every outcome is
// flags or a clear error, and accepted values are within their documented ranges.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/server/flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"kjitd"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(cur);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto flags = kjit::server::ParseFlags(static_cast<int>(args.size()), argv.data());
  if (!flags.ok()) return 0;
  if (flags->ring_spin_us < 0 || flags->max_request_bytes < 65536 || flags->max_regions < 1 ||
      flags->max_sessions < 1 || flags->max_rings < 1 || flags->socket.empty()) {
    __builtin_trap();
  }
  for (const std::string* listen : {&flags->listen, &flags->metrics_listen}) {
    if (listen->empty()) continue;
    const std::string port = listen->substr(listen->rfind(':') + 1);
    const long p = std::stol(port);
    if (p < 1 || p > 65535) __builtin_trap();
  }
  return 0;
}
