// CubinCache's private state, shared by the lookup path (cubin_cache.cc) and the maintenance
// commands (cache_maintenance.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "jit_cache/cubin_cache.h"
#include "jit_cache/posix_file.h"

namespace kjit::cache {

struct CubinCache::Impl {
  // An entry this process loaded: the pin is the entry file open with a shared flock (see "in use"
  // in cubin_cache.h); invalid for memory-only entries.
  struct Loaded {
    Entry entry;
    internal::UniqueFd pin;
    int64_t stamped_unix = 0;  // last time we wrote the last-used stamp
  };
  // One entry file found by a directory scan.
  struct FileInfo {
    std::string key;
    std::string path;
    uint64_t bytes = 0;
    int64_t last_used = 0;
  };

  std::string dir;          // the cache directory as resolved
  std::string entries_dir;  // dir/v1
  std::string locks_dir;    // dir/v1/locks

  // Set once by Open, then constant: no disk tier at all / entries read but never written.
  bool memory_only = false;
  bool read_only = false;

  mutable std::mutex mu;  // guards everything below
  std::string warning;     // from Open
  std::vector<std::string> notes;  // the first runtime problems, each logged once (Note)
  std::set<std::string> noted;     // their topics
  Stats stats;
  std::unordered_map<std::string, std::unique_ptr<Loaded>> memory;
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> key_mutexes;

  std::string EntryPath(const std::string& key) const { return entries_dir + "/" + key + ".cubin"; }
  std::string LockPath(const std::string& key) const { return locks_dir + "/" + key + ".lock"; }

  // Logs `line` once per topic (an entry's key, "write", "lock") and keeps it for warning(). The
  // cache never stops using its directory because of it: a bad entry is a miss, a failed write
  // keeps that entry in memory, and every other entry is still read and written.
  void Note(const std::string& topic, std::string line);
  bool MemoryOnly() const { return memory_only; }
  bool Writable() const { return !memory_only && !read_only; }
  // Entry files in entries_dir (names that are a valid key + ".cubin"), unordered.
  StatusOr<std::vector<FileInfo>> Scan() const;
};

}  // namespace kjit::cache
