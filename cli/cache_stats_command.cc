// `kjit cache stats`: a running daemon's cache counters (KernelService.CacheStats: hits, misses,
// compiles, evictions, corrupt entries, write failures, size), or with --cache-dir a directory's
// size and cap (counters belong to the process that keeps them, so a directory alone has none).
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/json.h"
#include "cli/output.h"
#include "jit_cache/cubin_cache.h"

namespace kjit::cli {

const Command& CacheStatsCommand() {
  static const Command cmd{
    "kjit cache stats [flags]",
    "A running daemon's cache: directory, entries, bytes and cap, and its lookups since it started\n"
    "(hits, misses, compiles, evictions, corrupt entries removed, entries it could not write).\n"
    "With --cache-dir, no daemon is asked: the directory's entries, bytes and cap only.",
    {TargetFlag(), DeadlineFlag(),
     {"cache-dir", "DIR", "read this directory instead of asking a daemon"},
     {"json", "", "print JSON instead of text"}}};
  return cmd;
}

namespace {

int DirectoryStats(const Parsed& p) {
  auto c = cache::CubinCache::Open(cache::Options{.dir = p.Get("cache-dir")});
  if (c->memory_only()) return Fail(absl::FailedPreconditionError(c->warning()));
  if (!c->warning().empty()) std::fprintf(stderr, "kjit: %s\n", c->warning().c_str());
  StatusOr<cache::CubinCache::DiskUsageReport> usage = c->DiskUsage();
  if (!usage.ok()) return Fail(usage.status());
  if (p.Has("json")) {
    PrintJson({{"directory", c->dir()}, {"entries", usage->entries}, {"bytes", usage->bytes},
               {"max_bytes", c->max_bytes()}, {"read_only", c->read_only()}});
    return kExitOk;
  }
  std::printf("directory   %s%s\nentries     %lu\nbytes       %s of %s\n", c->dir().c_str(),
              c->read_only() ? " (read-only)" : "", static_cast<unsigned long>(usage->entries),
              HumanBytes(usage->bytes).c_str(), HumanBytes(c->max_bytes()).c_str());
  return kExitOk;
}

}  // namespace

int CacheStats(const Parsed& p) {
  if (p.Has("cache-dir")) {
    if (p.Has("target")) return UsageError(CacheStatsCommand(), absl::InvalidArgumentError("--cache-dir and --target exclude each other"));
    return DirectoryStats(p);
  }
  StatusOr<std::chrono::milliseconds> deadline = DeadlineOf(p);
  if (!deadline.ok()) return UsageError(CacheStatsCommand(), deadline.status());
  DaemonClient c(p.Get("target"), *deadline);
  v1::CacheStatsResponse s;
  if (Status st = c.Check(c.kernels().CacheStats(c.Context().get(), {}, &s), "CacheStats", true); !st.ok()) {
    return Fail(st);
  }
  if (p.Has("json")) {
    PrintJson({{"target", c.target()}, {"directory", s.directory()}, {"entries", s.entries()},
               {"bytes", s.bytes()}, {"max_bytes", s.max_bytes()}, {"hits", s.hits()}, {"misses", s.misses()},
               {"compiles", s.compiles()}, {"evictions", s.evictions()}, {"corrupt", s.corrupt()},
               {"write_failures", s.write_failures()}, {"memory_only", s.memory_only()},
               {"read_only", s.read_only()}, {"warning", s.warning()}});
    return kExitOk;
  }
  std::printf("daemon          %s\ndirectory       %s%s%s\nentries         %lu\nbytes           %s of %s\n",
              c.target().c_str(), s.directory().c_str(), s.memory_only() ? " (memory only)" : "",
              s.read_only() ? " (read-only)" : "", static_cast<unsigned long>(s.entries()),
              HumanBytes(s.bytes()).c_str(), HumanBytes(s.max_bytes()).c_str());
  std::printf("hits            %lu\nmisses          %lu\ncompiles        %lu\nevictions       %lu\n"
              "corrupt         %lu\nwrite failures  %lu\n",
              static_cast<unsigned long>(s.hits()), static_cast<unsigned long>(s.misses()),
              static_cast<unsigned long>(s.compiles()), static_cast<unsigned long>(s.evictions()),
              static_cast<unsigned long>(s.corrupt()), static_cast<unsigned long>(s.write_failures()));
  if (!s.warning().empty()) std::printf("warning         %s\n", s.warning().c_str());
  return kExitOk;
}

}  // namespace kjit::cli
