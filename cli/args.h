// Command-line parsing for `kjit`: one Command per subcommand, with its flags and help text.
// (Subcommands each with their own flags and --help; absl's global flags do not fit that shape.)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace kjit::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed (compile error, corrupt entries)
inline constexpr int kExitUsage = 2;    // bad command line

struct Flag {
  std::string name;   // without "--"
  std::string value;  // placeholder shown in help ("N"); empty for a boolean flag
  std::string help;
};

struct Command {
  std::string usage;    // "kjit cache show KEY [flags]"
  std::string summary;  // one paragraph
  std::vector<Flag> flags;
  size_t min_args = 0;  // positional arguments
  size_t max_args = 0;
};

struct Parsed {
  std::vector<std::string> args;
  std::map<std::string, std::string> flags;  // boolean flags map to ""
  bool help = false;
  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : it->second;
  }
};

// argv[first..argc) against cmd: --name VALUE, --name=VALUE, --flag, --help/-h. InvalidArgument
// names the problem (unknown flag, missing value, wrong number of arguments).
StatusOr<Parsed> Parse(const Command& cmd, int argc, char** argv, int first);

std::string HelpText(const Command& cmd);

// Prints "kjit: <message>"; returns kExitFailure.
int Fail(const Status& s);

// Prints "kjit: <message>" and a hint to use --help; returns kExitUsage.
int UsageError(const Command& cmd, const Status& s);

}  // namespace kjit::cli
