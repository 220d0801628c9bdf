#include "cli/args.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kjit::cli {

StatusOr<Parsed> Parse(const Command& cmd, int argc, char** argv, int first) {
  Parsed p;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      p.help = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      p.args.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : cmd.flags) {
      if (f.name == name) flag = &f;
    }
    if (!flag) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (flag->value.empty()) {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
    } else if (!inline_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    p.flags[name] = value;
  }
  if (!p.help && (p.args.size() < cmd.min_args || p.args.size() > cmd.max_args)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", cmd.min_args == cmd.max_args ? "" : "between ", cmd.min_args,
                     cmd.min_args == cmd.max_args ? "" : absl::StrCat(" and ", cmd.max_args),
                     " argument(s), got ", p.args.size()));
  }
  return p;
}

std::string HelpText(const Command& cmd) {
  std::string out = absl::StrCat("usage: ", cmd.usage, "\n\n", cmd.summary, "\n");
  out += "\nflags:\n";
  for (const Flag& f : cmd.flags) {
    std::string left = absl::StrCat("--", f.name, f.value.empty() ? "" : " ", f.value);
    absl::StrAppendFormat(&out, "  %-22s %s\n", left, f.help);
  }
  absl::StrAppendFormat(&out, "  %-22s %s\n", "--help", "show this help");
  return out;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "kjit: %s\n", std::string(s.message()).c_str());
  return kExitFailure;
}

int UsageError(const Command& cmd, const Status& s) {
  std::fprintf(stderr, "kjit: %s\nusage: %s (see --help)\n", std::string(s.message()).c_str(),
               cmd.usage.c_str());
  return kExitUsage;
}

}  // namespace kjit::cli
