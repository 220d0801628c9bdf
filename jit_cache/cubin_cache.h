// Content-addressed cubin store shared by every process on a node (JIT_CACHE.md).
//
// Layout under the cache directory:  v1/<key>.cubin   one file per entry (entry_file.h)
//                                     v1/locks/<key>.lock  per-key compile lock (flock)
// Reads take no lock and verify the payload checksum. A miss takes the key's exclusive flock,
// checks again, compiles, writes a unique temp file in v1/, fsyncs, verifies it, rename()s it
// into place and fsyncs the directory. The kernel drops a flock when its holder dies, so a killed
// compiler never wedges the others, and nothing depends on a lock file being deleted.
//
// "In use": every process that loaded an entry (a disk hit, or its own compile) keeps the entry
// file open with a shared flock for as long as its CubinCache lives (the memory tier pins it).
// Gc and Clear only remove entries on which they can take an exclusive flock without waiting.
// (Cost: one open file descriptor per loaded entry.) Gc also removes lock files of absent entries
// that nobody holds; a waiter that locked a removed lock file notices and locks the new one.
//
// LRU: the last-used time is a field in the entry's fixed header, rewritten in place by kjit on
// load and (at most once a minute) on memory hits; the file system's atime is never consulted.
//
// Degrade per entry, never the whole cache: an entry file that is not a regular file (directory,
// FIFO, symbolic link, device), is larger than kMaxEntryBytes (checked before reading) or fails its
// checks is a miss, logged once with its reason, and replaced where it can be. A write that fails
// (full disk) keeps that entry in memory; every other entry is still read and written. A directory
// that can be read but not written is read_only(): entries are read, new ones stay in memory. Only
// a directory that cannot be read at all (or none named) makes the cache memory_only(). Callers
// are never stopped by any of it; warning() says what happened.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/common/kernel_resources.h"
#include "runtime/common/status.h"

namespace kjit::cache {

// Entry file format version; part of every key, so a format change never reads old files.
inline constexpr uint32_t kFormatVersion = 1;

// One kernel of a compiled program: its name expression, lowered name and ptxas's resource report
// (everything but const_bytes is stored in the entry).
struct KernelInfo {
  std::string name_expression;  // e.g. "kjit::mla_verify_split<8, false>"
  KernelResources resources;
};

// Everything that determines the cubin (JIT_CACHE.md "Key"). No paths, UUIDs or times.
struct KeyInputs {
  std::string source;                                        // full program text (the entry source)
  std::vector<std::pair<std::string, std::string>> headers;  // our headers: include name -> content
  std::string toolkit_id;                // the toolkit's headers: NVRTC version + build
  std::vector<std::string> options;      // normalized, defaults spelled out, in compile order
  std::string arch;                      // exact: "sm_120" != "sm_120a"
  std::string output_kind = "cubin";
  std::string nvrtc_version;             // major.minor (+ build)
  std::vector<std::string> name_expressions;  // order-insensitive: sorted inside ComputeKey
};

// Lower-case hex SHA-256 (64 chars) over a canonical, length-prefixed record of the inputs and
// kFormatVersion. Headers are sorted by name; options keep their order (order can matter).
std::string ComputeKey(const KeyInputs& inputs);

// True for 64 lower-case hex digits (what ComputeKey returns); guards every path built from a key.
bool IsValidKey(std::string_view key);

struct EntryMeta {
  std::string family;          // "mla_verify"
  std::string specialization;  // "h8_bool"
  std::string arch;            // "sm_120"
  std::string nvrtc_version;
  std::vector<std::string> options;
  std::vector<KernelInfo> kernels;
  double compile_ms = 0;
  int64_t created_unix = 0;    // set by the cache when the entry is written
  int64_t last_used_unix = 0;  // maintained by the cache
};

struct Entry {
  std::string key;
  EntryMeta meta;
  std::vector<char> cubin;
};

enum class Origin { kCompiled, kDiskHit, kMemoryHit };
const char* OriginName(Origin origin);  // "compiled", "disk", "memory" (static strings)

struct Stats {
  uint64_t hits_memory = 0;
  uint64_t hits_disk = 0;
  uint64_t misses = 0;          // lookups that found no usable entry (memory and disk)
  uint64_t compiles = 0;        // compile callbacks run by this process
  uint64_t evictions = 0;       // entries removed by Gc (explicit or automatic)
  uint64_t corrupt = 0;         // entry files that failed a check and were deleted
  uint64_t write_failures = 0;  // entries that could not be written (kept in memory)
};

struct Options {
  std::string dir;         // "" -> $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else ~/.cache/kjit
  uint64_t max_bytes = 0;  // 0 -> $KJIT_CACHE_MAX_BYTES, else 1 GiB
  bool memory_only = false;
};

// What a lookup is for: the key plus what the entry must say about itself. A file whose meta arch
// differs from `arch` is treated as corrupt. family/specialization name the wait message.
struct Request {
  std::string key;
  std::string arch;
  std::string family;
  std::string specialization;
};

// One entry file as seen by ls/show.
struct ListedEntry {
  std::string key;
  EntryMeta meta;
  uint64_t file_bytes = 0;
  bool in_use = false;  // another open CubinCache (maybe this one) holds it
};

struct VerifyReport {
  uint64_t checked = 0;
  uint64_t ok = 0;
  std::vector<std::pair<std::string, std::string>> bad;  // file name -> reason (removed)
};

struct GcReport {
  uint64_t bytes_before = 0;
  uint64_t bytes_after = 0;
  uint64_t removed = 0;
  uint64_t skipped_in_use = 0;
};

class CubinCache {
 public:
  // Never fails: an unusable directory gives a memory-only cache with warning() set.
  static std::unique_ptr<CubinCache> Open(Options opts);
  ~CubinCache();
  CubinCache(const CubinCache&) = delete;
  CubinCache& operator=(const CubinCache&) = delete;

  // Memory tier, then disk, else compile() under the key's flock (checking disk again after
  // acquiring it). compile() fills meta and cubin (meta.arch must equal req.arch); its error is
  // returned unchanged and nothing is written. Thread-safe.
  StatusOr<Entry> GetOrCreate(const Request& req, const std::function<StatusOr<Entry>()>& compile,
                              Origin* origin = nullptr);

  Stats stats() const;
  bool memory_only() const;
  bool read_only() const;          // entries are read, never written (the directory is not writable)
  const std::string& dir() const;  // the resolved directory (even when memory-only)
  std::string warning() const;     // "" when the disk tier works
  uint64_t max_bytes() const { return max_bytes_; }

  // Inspection and maintenance (`kjit cache ...`); FailedPrecondition when memory-only, and for
  // Gc and Clear when read-only (Verify then reports bad entries without removing them).
  StatusOr<std::vector<ListedEntry>> List() const;          // sorted by key
  // Entry files and their bytes on disk, from the directory alone (nothing read or verified).
  struct DiskUsageReport {
    uint64_t entries = 0;
    uint64_t bytes = 0;
  };
  StatusOr<DiskUsageReport> DiskUsage() const;
  StatusOr<Entry> Show(std::string_view key_prefix) const;  // a unique key prefix is enough
  StatusOr<VerifyReport> Verify();                          // removes entries that fail
  StatusOr<GcReport> Gc(uint64_t max_bytes);                // LRU until total <= max_bytes
  StatusOr<GcReport> Clear();                               // Gc(0)

  struct Impl;  // private state (cache_impl.h); named here so the implementation files share it

 private:
  explicit CubinCache(std::unique_ptr<Impl> impl, uint64_t max_bytes);
  std::unique_ptr<Impl> impl_;
  uint64_t max_bytes_;
};

}  // namespace kjit::cache
