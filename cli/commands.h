// Subcommand groups of `kjit`; each returns the process exit status (args.h: kExit*).
#pragma once

namespace kjit::cli {

int RunCache(int argc, char** argv, int first);    // argv[first] is the cache command
int RunCompile(int argc, char** argv, int first);  // argv[first] is the first flag

}  // namespace kjit::cli
