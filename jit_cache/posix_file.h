// Small POSIX helpers for the cache: an owning file descriptor, whole-file I/O and flock, each
// returning Status with the path and errno text in the message.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace kjit::cache::internal {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.Release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.Release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// errno as a Status: NotFound for ENOENT; DataLoss for what a file of ours can never be (a symbolic
// link under O_NOFOLLOW, a directory); else PermissionDenied/ResourceExhausted/Internal by kind.
Status ErrnoStatus(int err, const std::string& what, const std::string& path);

// open(2) of a file (never a directory) with O_CLOEXEC, O_NOFOLLOW and O_NONBLOCK added: a
// symbolic link is refused (DataLoss) rather than followed, and a FIFO opens without waiting for
// a writer (ReadAll then refuses it).
StatusOr<UniqueFd> OpenFile(const std::string& path, int flags, mode_t mode = 0644);
// The whole file, which must be a regular file of at most max_bytes (checked before anything is
// read or allocated); DataLoss naming the defect otherwise.
StatusOr<std::string> ReadAll(int fd, const std::string& path, uint64_t max_bytes);
// "a directory", "a FIFO", ... for a file type that is not a regular file.
const char* FileKind(mode_t mode);
Status WriteAll(int fd, std::string_view bytes, const std::string& path);
Status FsyncDir(const std::string& dir);

// flock without waiting: true when taken, false when another open file holds a conflicting lock.
StatusOr<bool> TryFlock(int fd, int operation /* LOCK_SH or LOCK_EX */, const std::string& path);

// True when `path` still names the file open as `fd` (not unlinked or replaced).
bool SameFile(int fd, const std::string& path);

// Exclusive lock on a lock file (created if absent), held until the returned fd is closed. Polls;
// after ~1 s of waiting calls on_long_wait() once. Retries when the file was removed or replaced
// while waiting, so removing an unlocked lock file (Gc) is safe.
StatusOr<UniqueFd> LockExclusive(const std::string& path, const std::function<void()>& on_long_wait);

}  // namespace kjit::cache::internal
