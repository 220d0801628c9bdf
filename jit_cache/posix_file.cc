#include "jit_cache/posix_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kjit::cache::internal {

void UniqueFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Status ErrnoStatus(int err, const std::string& what, const std::string& path) {
  std::string msg = absl::StrCat(what, " ", path, ": ", strerror(err));
  switch (err) {
    case ENOENT: return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
    case EROFS: return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT: return absl::ResourceExhaustedError(msg);
    case ELOOP: return absl::DataLossError(absl::StrCat(path, " is a symbolic link (refused, not followed)"));
    case EISDIR: return absl::DataLossError(absl::StrCat(path, " is a directory, not a file"));
    default: return absl::InternalError(msg);
  }
}

StatusOr<UniqueFd> OpenFile(const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  return UniqueFd(fd);
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

StatusOr<std::string> ReadAll(int fd, const std::string& path, uint64_t max_bytes) {
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus(errno, "fstat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, " is ", FileKind(st.st_mode), ", not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::DataLossError(absl::StrCat(path, " is ", st.st_size, " bytes, more than the ", max_bytes,
                                            " any entry can be"));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read", path);
    if (n == 0) break;  // shrank underneath us: the caller's checks see a short file
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "write", path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

Status FsyncDir(const std::string& dir) {
  int raw;
  do {
    raw = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) return ErrnoStatus(errno, "open", dir);
  UniqueFd fd(raw);
  if (fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync", dir);
  return absl::OkStatus();
}

StatusOr<bool> TryFlock(int fd, int operation, const std::string& path) {
  while (flock(fd, operation | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return false;
    return ErrnoStatus(errno, "flock", path);
  }
  return true;
}

bool SameFile(int fd, const std::string& path) {
  struct stat a, b;
  if (fstat(fd, &a) != 0 || stat(path.c_str(), &b) != 0) return false;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

StatusOr<UniqueFd> LockExclusive(const std::string& path,
                                 const std::function<void()>& on_long_wait) {
  const auto start = std::chrono::steady_clock::now();
  bool told = false;
  for (;;) {
    KJIT_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDWR | O_CREAT));
    for (;;) {
      KJIT_ASSIGN_OR_RETURN(bool taken, TryFlock(fd.get(), LOCK_EX, path));
      if (taken) break;
      if (!told && std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) {
        told = true;
        if (on_long_wait) on_long_wait();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (SameFile(fd.get(), path)) return fd;
    // Removed or replaced while we waited: the lock we hold guards nothing; take the new file's.
  }
}

}  // namespace kjit::cache::internal
