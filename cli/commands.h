// Subcommand groups of `kjit`; each returns the process exit status (args.h: kExit*).
#pragma once

#include <chrono>

#include "cli/args.h"

namespace kjit::cli {

int RunCache(int argc, char** argv, int first);    // argv[first] is the cache command
int RunCompile(int argc, char** argv, int first);  // argv[first] is the first flag
int RunStatus(int argc, char** argv, int first);   // argv[first] is the first flag

// `kjit cache stats` (cache_stats_command.cc), dispatched by RunCache.
const Command& CacheStatsCommand();
int CacheStats(const Parsed& p);

// The flags of the commands that ask a running daemon (status_command.cc). Functions, not
// globals: commands in other files build their flag lists from them during static initialization.
Flag TargetFlag();
Flag DeadlineFlag();
StatusOr<std::chrono::milliseconds> DeadlineOf(const Parsed& p);  // --deadline-ms, default 5 s

}  // namespace kjit::cli
