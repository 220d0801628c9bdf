// `kjit cache ls | show | verify | gc | clear`: directory scans over entry files.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jit_cache/cache_impl.h"
#include "jit_cache/entry_file.h"

namespace kjit::cache {
namespace {

using internal::UniqueFd;
constexpr char kSuffix[] = ".cubin";
constexpr int64_t kStaleTempS = 3600;  // a temp file this old belongs to a writer that died

Status NeedsDisk(const CubinCache::Impl& impl) {
  if (impl.MemoryOnly()) {
    return absl::FailedPreconditionError(absl::StrCat("cache is memory-only: ", impl.warning));
  }
  return absl::OkStatus();
}

Status NeedsWritableDisk(const CubinCache::Impl& impl) {
  KJIT_RETURN_IF_ERROR(NeedsDisk(impl));
  if (impl.read_only) return absl::FailedPreconditionError(absl::StrCat("cache is read-only: ", impl.warning));
  return absl::OkStatus();
}

// True when some process (this one included) holds the file pinned; false when we could take the
// exclusive lock, which we then keep in `*held` so the caller may remove the file under it.
StatusOr<bool> InUse(const std::string& path, UniqueFd* held) {
  StatusOr<UniqueFd> fd = internal::OpenFile(path, O_RDONLY);
  if (!fd.ok()) return fd.status();
  KJIT_ASSIGN_OR_RETURN(bool taken, internal::TryFlock(fd->get(), LOCK_EX, path));
  if (!taken) return true;
  *held = *std::move(fd);
  return false;
}

// Reads and checks one entry file; *fd (when given) keeps the file that was read open.
StatusOr<Entry> Load(const std::string& path, const std::string& key, UniqueFd* fd_out = nullptr) {
  KJIT_ASSIGN_OR_RETURN(UniqueFd fd, internal::OpenFile(path, O_RDONLY));
  StatusOr<std::string> bytes = internal::ReadAll(fd.get(), path, internal::kMaxEntryBytes);
  if (fd_out) *fd_out = std::move(fd);
  if (!bytes.ok()) return bytes.status();
  return internal::DecodeEntry(*bytes, key);
}

// Removes one entry file that failed Load: the file that was read (`read`), or, when it could not
// be read, whatever non-file is still at the path (an empty directory is removed, a full one is
// left: it is not ours to empty).
Status RemoveBad(bool read_only, const CubinCache::Impl::FileInfo& f, const UniqueFd& read) {
  if (read_only) return absl::FailedPreconditionError("the cache is read-only");
  struct stat st;
  if (lstat(f.path.c_str(), &st) != 0) return absl::OkStatus();                // gone meanwhile
  if (read.valid() && !internal::SameFile(read.get(), f.path)) return absl::OkStatus();  // replaced
  if (!read.valid() && S_ISREG(st.st_mode)) return absl::OkStatus();  // a file we could not open
  if (S_ISDIR(st.st_mode)) {
    if (rmdir(f.path.c_str()) != 0) return internal::ErrnoStatus(errno, "rmdir", f.path);
  } else if (unlink(f.path.c_str()) != 0 && errno != ENOENT) {
    return internal::ErrnoStatus(errno, "unlink", f.path);
  }
  return absl::OkStatus();
}

// Removes temp files of dead writers and lock files of absent entries nobody holds.
void RemoveLeftovers(const CubinCache::Impl& impl) {
  std::error_code ec;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  for (const auto& f : std::filesystem::directory_iterator(impl.entries_dir, ec)) {
    const std::string name = f.path().filename().string();
    struct stat st;
    if ((absl::StartsWith(name, ".tmp-") || absl::StartsWith(name, ".probe-")) &&
        stat(f.path().c_str(), &st) == 0 && now - st.st_mtime > kStaleTempS) {
      unlink(f.path().c_str());
    }
  }
  for (const auto& f : std::filesystem::directory_iterator(impl.locks_dir, ec)) {
    const std::string name = f.path().filename().string();
    const std::string key = name.substr(0, name.find('.'));
    if (!IsValidKey(key) || access(impl.EntryPath(key).c_str(), F_OK) == 0) continue;
    // Safe under the lock: LockExclusive retries when its file was removed while it waited.
    StatusOr<UniqueFd> fd = internal::OpenFile(f.path().string(), O_RDONLY);
    if (!fd.ok()) continue;
    StatusOr<bool> taken = internal::TryFlock(fd->get(), LOCK_EX, f.path().string());
    if (taken.ok() && *taken) unlink(f.path().c_str());
  }
}

}  // namespace

StatusOr<std::vector<CubinCache::Impl::FileInfo>> CubinCache::Impl::Scan() const {
  std::vector<FileInfo> out;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(entries_dir, ec)) {
    const std::string name = f.path().filename().string();
    if (!absl::EndsWith(name, kSuffix)) continue;
    FileInfo info;
    info.key = name.substr(0, name.size() - (sizeof(kSuffix) - 1));
    if (!IsValidKey(info.key)) continue;
    info.path = f.path().string();
    struct stat st;
    if (lstat(info.path.c_str(), &st) != 0) continue;  // removed meanwhile
    if (!S_ISREG(st.st_mode)) {  // listed so that verify reports and removes it; not opened here
      out.push_back(std::move(info));
      continue;
    }
    info.bytes = static_cast<uint64_t>(st.st_size);
    StatusOr<UniqueFd> fd = internal::OpenFile(info.path, O_RDONLY);
    if (!fd.ok()) continue;  // removed or replaced meanwhile
    std::string header(internal::kHeaderBytes, '\0');
    ssize_t n = pread(fd->get(), header.data(), header.size(), 0);
    header.resize(n > 0 ? static_cast<size_t>(n) : 0);
    info.last_used = internal::DecodeLastUsed(header);
    out.push_back(std::move(info));
  }
  if (ec) return absl::UnavailableError(absl::StrCat("cannot list ", entries_dir, ": ", ec.message()));
  return out;
}

StatusOr<std::vector<ListedEntry>> CubinCache::List() const {
  KJIT_RETURN_IF_ERROR(NeedsDisk(*impl_));
  KJIT_ASSIGN_OR_RETURN(auto files, impl_->Scan());
  std::vector<ListedEntry> out;
  for (const auto& f : files) {
    StatusOr<Entry> e = Load(f.path, f.key);
    if (!e.ok()) continue;  // `verify` reports it
    ListedEntry l;
    l.key = f.key;
    l.meta = std::move(e->meta);
    l.file_bytes = f.bytes;
    UniqueFd held;
    StatusOr<bool> busy = InUse(f.path, &held);
    l.in_use = busy.ok() && *busy;
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

StatusOr<CubinCache::DiskUsageReport> CubinCache::DiskUsage() const {
  KJIT_RETURN_IF_ERROR(NeedsDisk(*impl_));
  KJIT_ASSIGN_OR_RETURN(auto files, impl_->Scan());
  DiskUsageReport r;
  for (const auto& f : files) {
    ++r.entries;
    r.bytes += f.bytes;
  }
  return r;
}

StatusOr<Entry> CubinCache::Show(std::string_view key_prefix) const {
  KJIT_RETURN_IF_ERROR(NeedsDisk(*impl_));
  const std::string prefix(key_prefix);
  if (prefix.empty()) return absl::InvalidArgumentError("empty key");
  KJIT_ASSIGN_OR_RETURN(auto files, impl_->Scan());
  const Impl::FileInfo* match = nullptr;
  for (const auto& f : files) {
    if (!absl::StartsWith(f.key, prefix)) continue;
    if (match) return absl::InvalidArgumentError(absl::StrCat("key prefix ", prefix, " is ambiguous"));
    match = &f;
  }
  if (!match) return absl::NotFoundError(absl::StrCat("no cache entry with key ", prefix, " in ", impl_->dir));
  return Load(match->path, match->key);
}

StatusOr<VerifyReport> CubinCache::Verify() {
  KJIT_RETURN_IF_ERROR(NeedsDisk(*impl_));
  KJIT_ASSIGN_OR_RETURN(auto files, impl_->Scan());
  VerifyReport report;
  for (const auto& f : files) {
    ++report.checked;
    UniqueFd read;
    StatusOr<Entry> e = Load(f.path, f.key, &read);
    if (e.ok()) {
      ++report.ok;
      continue;
    }
    if (absl::IsNotFound(e.status())) continue;  // removed meanwhile
    std::string reason(e.status().message());
    // A broken file is never served (readers check it); removing it just saves the next miss.
    // Only the file we read (or, for what cannot be read, the same non-file): a writer may have
    // renamed a good entry into place since.
    if (Status removed = RemoveBad(impl_->read_only, f, read); !removed.ok()) {
      absl::StrAppend(&reason, "; left in place: ", removed.message());
    }
    report.bad.emplace_back(f.key + std::string(kSuffix), std::move(reason));
    std::lock_guard<std::mutex> l(impl_->mu);
    ++impl_->stats.corrupt;
  }
  return report;
}

StatusOr<GcReport> CubinCache::Gc(uint64_t max_bytes) {
  KJIT_RETURN_IF_ERROR(NeedsWritableDisk(*impl_));
  KJIT_ASSIGN_OR_RETURN(auto files, impl_->Scan());
  GcReport r;
  for (const auto& f : files) r.bytes_before += f.bytes;
  r.bytes_after = r.bytes_before;
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.key < b.key;
  });
  for (const auto& f : files) {
    if (r.bytes_after <= max_bytes) break;
    UniqueFd held;
    StatusOr<bool> busy = InUse(f.path, &held);
    if (!busy.ok()) continue;  // already gone
    if (*busy) {
      ++r.skipped_in_use;
      continue;
    }
    if (!internal::SameFile(held.get(), f.path) || unlink(f.path.c_str()) != 0) continue;
    r.bytes_after -= f.bytes;
    ++r.removed;
    std::lock_guard<std::mutex> l(impl_->mu);
    ++impl_->stats.evictions;
  }
  RemoveLeftovers(*impl_);
  return r;
}

StatusOr<GcReport> CubinCache::Clear() { return Gc(0); }

}  // namespace kjit::cache
