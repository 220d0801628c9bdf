// `kjit`: fill, inspect and maintain the cubin cache from the command line; show a running daemon.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "runtime/common/log.h"

namespace {

constexpr char kHelp[] =
    "usage: kjit COMMAND [flags]\n\n"
    "commands:\n"
    "  compile   compile the kernel catalog for given archs into the cache\n"
    "  cache     inspect and maintain the cache (ls, show, verify, gc, clear, stats)\n"
    "  status    a running kjitd: health, GPUs, kernels, sessions, regions, rings, launches\n\n"
    "`kjit COMMAND --help` describes each. Exit status: 0 ok, 1 failure, 2 usage error.\n";

}  // namespace

int main(int argc, char** argv) {
  kjit::SetLogProgram("kjit");
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kHelp, stdout);
    return kjit::cli::kExitOk;
  }
  if (cmd == "compile") return kjit::cli::RunCompile(argc, argv, 2);
  if (cmd == "cache") return kjit::cli::RunCache(argc, argv, 2);
  if (cmd == "status") return kjit::cli::RunStatus(argc, argv, 2);
  std::fprintf(stderr, "kjit: %s\n%s", cmd.empty() ? "missing command" : ("unknown command '" + cmd + "'").c_str(), kHelp);
  return kjit::cli::kExitUsage;
}
