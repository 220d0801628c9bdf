// kjitd: the node-local kernel daemon (ARCHITECTURE.md).
#include <cstdio>
#include <string>

#include "runtime/server/flags.h"
#include "runtime/server/server.h"

int main(int argc, char** argv) {
  auto flags = kjit::server::ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "kjitd: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help) {
    std::fputs(kjit::server::Usage().c_str(), stdout);
    return 0;
  }
  kjit::Status s = kjit::server::RunDaemon(*flags);
  if (!s.ok()) {
    std::fprintf(stderr, "kjitd: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
