// The lookup path: memory tier, lock-free disk read, then compile under the key's flock.
#include "jit_cache/cubin_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "jit_cache/cache_impl.h"
#include "jit_cache/entry_file.h"

namespace kjit::cache {
namespace {

using internal::UniqueFd;

constexpr int64_t kStampIntervalS = 60;  // memory hits rewrite the last-used stamp at most this often

int64_t NowUnix() { return static_cast<int64_t>(std::time(nullptr)); }

void Stamp(CubinCache::Impl::Loaded& l, int64_t now) {
  if (!l.pin.valid()) return;
  const std::string b = internal::EncodeLastUsed(now);
  // Best effort: a read-only file keeps its old stamp and only ages sooner.
  if (pwrite(l.pin.get(), b.data(), b.size(), internal::kLastUsedOffset) == 8) {
    l.entry.meta.last_used_unix = now;
  }
  l.stamped_unix = now;
}

struct DiskRead {
  enum Kind { kMissing, kHit, kBad } kind = kMissing;
  std::unique_ptr<CubinCache::Impl::Loaded> loaded;
  Status why;  // for kBad (and unexpected I/O errors)
};

// Lock-free read of the entry file, checked against the request; a hit keeps it pinned. A file
// that can never be an entry of ours (DataLoss: not a regular file, too large, failed checks) is
// kBad; a file we cannot open for another reason (permissions, fd limit) is kMissing with `why`.
DiskRead ReadFromDisk(const CubinCache::Impl& impl, const Request& req) {
  DiskRead r;
  const std::string path = impl.EntryPath(req.key);
  StatusOr<UniqueFd> fd = internal::OpenFile(path, impl.Writable() ? O_RDWR : O_RDONLY);
  if (!fd.ok() && absl::IsPermissionDenied(fd.status())) fd = internal::OpenFile(path, O_RDONLY);
  if (!fd.ok()) {
    if (absl::IsDataLoss(fd.status())) r.kind = DiskRead::kBad;
    if (!absl::IsNotFound(fd.status())) r.why = fd.status();
    return r;
  }
  // Gc and `kjit cache ls` hold LOCK_EX only for a moment (Gc then removes the file): wait that
  // out briefly, then treat the entry as absent.
  StatusOr<bool> pinned = false;
  for (int i = 0; i < 5 && pinned.ok() && !*pinned; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    pinned = internal::TryFlock(fd->get(), LOCK_SH, path);
  }
  if (!pinned.ok() || !*pinned) return r;
  StatusOr<std::string> bytes = internal::ReadAll(fd->get(), path, internal::kMaxEntryBytes);
  if (!bytes.ok()) {
    if (absl::IsDataLoss(bytes.status())) r.kind = DiskRead::kBad;
    r.why = bytes.status();
    return r;
  }
  StatusOr<Entry> e = internal::DecodeEntry(*bytes, req.key);
  if (e.ok() && e->meta.arch != req.arch) {
    e = absl::DataLossError(absl::StrCat("cache entry: arch ", e->meta.arch, " but ", req.arch,
                                         " was requested"));
  }
  if (!e.ok()) {
    r.kind = DiskRead::kBad;
    r.why = e.status();
    return r;
  }
  r.kind = DiskRead::kHit;
  r.loaded = std::make_unique<CubinCache::Impl::Loaded>();
  r.loaded->entry = *std::move(e);
  r.loaded->pin = *std::move(fd);
  Stamp(*r.loaded, NowUnix());
  return r;
}

// Logs (once per entry) why a file was not used.
void NoteRead(CubinCache::Impl& impl, const Request& req, const DiskRead& r) {
  if (r.kind == DiskRead::kHit || r.why.ok()) return;
  impl.Note(req.key, absl::StrCat("cache entry ", impl.EntryPath(req.key), " not used (", r.why.message(),
                                  r.kind == DiskRead::kBad ? "); treated as a miss and replaced"
                                                           : "); treated as a miss"));
}

// Removes a bad entry file under the key's lock. A directory is removed only when empty; whatever
// stays makes the write after the compile fail, which keeps that entry in memory.
void RemoveBad(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno == EISDIR) (void)rmdir(path.c_str());
}

// Unique temp file in the entries directory, fsync, read back and check, pin, rename, fsync dir.
StatusOr<UniqueFd> WriteEntry(const CubinCache::Impl& impl, const Entry& entry) {
  const std::string bytes = internal::EncodeEntry(entry);
  std::string tmp = impl.entries_dir + "/.tmp-" + entry.key + "-XXXXXX";
  int raw = mkostemp(tmp.data(), O_CLOEXEC);
  if (raw < 0) return internal::ErrnoStatus(errno, "create temp file in", impl.entries_dir);
  UniqueFd fd(raw);
  auto fail = [&](Status s) {
    unlink(tmp.c_str());
    return s;
  };
  if (Status s = internal::WriteAll(fd.get(), bytes, tmp); !s.ok()) return fail(s);
  if (fsync(fd.get()) != 0) return fail(internal::ErrnoStatus(errno, "fsync", tmp));
  StatusOr<std::string> back = internal::ReadAll(fd.get(), tmp, internal::kMaxEntryBytes);
  if (!back.ok()) return fail(back.status());
  if (StatusOr<Entry> check = internal::DecodeEntry(*back, entry.key); !check.ok()) {
    return fail(WithContext(check.status(), absl::StrCat("read-back of ", tmp)));
  }
  if (StatusOr<bool> p = internal::TryFlock(fd.get(), LOCK_SH, tmp); !p.ok()) return fail(p.status());
  const std::string path = impl.EntryPath(entry.key);
  if (rename(tmp.c_str(), path.c_str()) != 0) return fail(internal::ErrnoStatus(errno, "rename to", path));
  if (Status s = internal::FsyncDir(impl.entries_dir); !s.ok()) return s;
  return fd;
}

Entry Remember(CubinCache::Impl& impl, std::unique_ptr<CubinCache::Impl::Loaded> loaded) {
  std::lock_guard<std::mutex> l(impl.mu);
  Entry copy = loaded->entry;
  impl.memory[copy.key] = std::move(loaded);
  return copy;
}

// A memory hit, or nullopt. Counts the hit.
std::optional<Entry> FromMemory(CubinCache::Impl& impl, const std::string& key) {
  std::lock_guard<std::mutex> l(impl.mu);
  auto it = impl.memory.find(key);
  if (it == impl.memory.end()) return std::nullopt;
  const int64_t now = NowUnix();
  if (now - it->second->stamped_unix >= kStampIntervalS) Stamp(*it->second, now);
  ++impl.stats.hits_memory;
  return it->second->entry;
}

}  // namespace

StatusOr<Entry> CubinCache::GetOrCreate(const Request& req,
                                        const std::function<StatusOr<Entry>()>& compile,
                                        Origin* origin) {
  if (!IsValidKey(req.key)) {
    return absl::InvalidArgumentError(absl::StrCat("cache key '", req.key, "' is not a hex SHA-256"));
  }
  Impl& impl = *impl_;
  auto done = [&](Origin o, Entry e) -> StatusOr<Entry> {
    if (origin) *origin = o;
    return e;
  };
  if (auto e = FromMemory(impl, req.key)) return done(Origin::kMemoryHit, *std::move(e));
  if (!impl.MemoryOnly()) {
    DiskRead r = ReadFromDisk(impl, req);
    if (r.kind == DiskRead::kHit) {
      { std::lock_guard<std::mutex> l(impl.mu); ++impl.stats.hits_disk; }
      return done(Origin::kDiskHit, Remember(impl, std::move(r.loaded)));
    }
    if (!impl.Writable()) NoteRead(impl, req, r);  // a writer notes it below, after the lock
  }

  // Miss: one compiler per key, across threads (this mutex) and processes (the flock).
  std::shared_ptr<std::mutex> key_mu;
  {
    std::lock_guard<std::mutex> l(impl.mu);
    auto& m = impl.key_mutexes[req.key];
    if (!m) m = std::make_shared<std::mutex>();
    key_mu = m;
  }
  std::lock_guard<std::mutex> key_guard(*key_mu);
  if (auto e = FromMemory(impl, req.key)) return done(Origin::kMemoryHit, *std::move(e));

  UniqueFd key_lock;
  if (impl.Writable()) {
    auto on_wait = [&] {
      std::fprintf(stderr, "kjit cache: waiting for another process compiling %s/%s for %s (key %.12s)\n",
                   req.family.c_str(), req.specialization.c_str(), req.arch.c_str(), req.key.c_str());
    };
    StatusOr<UniqueFd> lock = internal::LockExclusive(impl.LockPath(req.key), on_wait);
    if (lock.ok()) {
      key_lock = *std::move(lock);
    } else {
      impl.Note("lock", absl::StrCat("cannot take a compile lock (", lock.status().message(),
                                     "); compiling without it and writing no entry"));
    }
  }
  if (key_lock.valid()) {
    DiskRead r = ReadFromDisk(impl, req);
    if (r.kind == DiskRead::kHit) {  // another process compiled it while we waited
      { std::lock_guard<std::mutex> l(impl.mu); ++impl.stats.hits_disk; }
      return done(Origin::kDiskHit, Remember(impl, std::move(r.loaded)));
    }
    NoteRead(impl, req, r);
    if (r.kind == DiskRead::kBad) {
      RemoveBad(impl.EntryPath(req.key));
      std::lock_guard<std::mutex> l(impl.mu);
      ++impl.stats.corrupt;
    }
  }

  {
    std::lock_guard<std::mutex> l(impl.mu);
    ++impl.stats.misses;
    ++impl.stats.compiles;
  }
  StatusOr<Entry> compiled = compile();
  if (!compiled.ok()) return compiled.status();
  if (compiled->meta.arch != req.arch || compiled->cubin.empty()) {
    return absl::InternalError(absl::StrCat("compile for ", req.family, "/", req.specialization,
                                            " returned arch '", compiled->meta.arch, "' and ",
                                            compiled->cubin.size(), " cubin bytes; wanted ", req.arch));
  }
  auto loaded = std::make_unique<Impl::Loaded>();
  loaded->entry = *std::move(compiled);
  loaded->entry.key = req.key;
  loaded->entry.meta.created_unix = loaded->entry.meta.last_used_unix = NowUnix();
  loaded->stamped_unix = loaded->entry.meta.created_unix;
  bool wrote = false;
  if (key_lock.valid()) {
    StatusOr<UniqueFd> pin = WriteEntry(impl, loaded->entry);
    if (pin.ok()) {
      loaded->pin = *std::move(pin);
      wrote = true;
    } else {
      { std::lock_guard<std::mutex> l(impl.mu); ++impl.stats.write_failures; }
      impl.Note("write", absl::StrCat("cannot write a cache entry (", pin.status().message(),
                                      "); keeping it in memory, still reading and writing the others "
                                      "(later failures are counted in write_failures)"));
    }
  }
  Entry result = Remember(impl, std::move(loaded));
  key_lock.Reset();
  if (wrote) (void)Gc(max_bytes_);  // best effort; the new entry is pinned, so it stays
  return done(Origin::kCompiled, std::move(result));
}

}  // namespace kjit::cache
