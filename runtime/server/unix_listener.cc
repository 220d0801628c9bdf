#include "runtime/server/unix_listener.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/common/log.h"

namespace kjit::server {

StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const std::string& path, mode_t mode) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' must be 1 to ",
                                                   sizeof(addr.sun_path) - 1, " bytes long"));
  }
  // Bound under a temporary name in the same directory and renamed into place once listening, so
  // the socket's path exists only when a connection to it is accepted (a client that waits for the
  // file, as scripts do, is never refused). A path too long for the temporary name binds directly.
  const std::string temp = absl::StrCat(path, ".", getpid(), ".tmp");
  const std::string& bound = temp.size() < sizeof(addr.sun_path) ? temp : path;
  std::memcpy(addr.sun_path, bound.data(), bound.size());
  if (&bound == &temp) unlink(temp.c_str());  // a crashed daemon's of the same pid
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket(): ", std::strerror(errno)));
  auto fail = [&](const char* step) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on unix://", path, " (", step, ": ",
                                               std::strerror(err), ")"));
  };
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return fail("bind");
  if (chmod(bound.c_str(), mode) != 0) {
    const Status s = fail("chmod");
    unlink(bound.c_str());
    return s;
  }
  if (listen(fd, SOMAXCONN) != 0) {
    const Status s = fail("listen");
    unlink(bound.c_str());
    return s;
  }
  // RENAME_NOREPLACE: like bind, never over an existing path (another daemon's socket).
  if (&bound == &temp && renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    const Status s = fail("rename into place");
    unlink(temp.c_str());
    return s;
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const Status s = fail("pipe");
    unlink(path.c_str());
    return s;
  }
  return std::unique_ptr<UnixListener>(new UnixListener(fd, wake[0], wake[1]));
}

UnixListener::~UnixListener() {
  Stop();
  close(wake_read_);
  close(wake_write_);
}

void UnixListener::Serve(grpc::Server* server) {
  thread_ = std::thread([this, server] { Loop(server); });
}

void UnixListener::Loop(grpc::Server* server) {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, absl::StrCat("the Unix socket's accept loop stopped: poll: ", std::strerror(errno)));
      return;
    }
    if (fds[1].revents != 0) return;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE, ENFILE, ENOBUFS, ENOMEM: out of descriptors or memory for now. Say so once a
      // second at most, and wait a little rather than spin.
      static auto last = std::chrono::steady_clock::time_point{};
      const auto now = std::chrono::steady_clock::now();
      if (now - last > std::chrono::seconds(1)) {
        Log(LogLevel::kWarn, absl::StrCat("cannot accept a connection on the Unix socket: ", std::strerror(errno)));
        last = now;
      }
      poll(fds + 1, 1, 10);
      continue;
    }
    accepted_.fetch_add(1);
    grpc::AddInsecureChannelFromFd(server, conn);  // gRPC owns conn from here
  }
}

void UnixListener::Stop() {
  if (fd_ < 0) return;
  const char one = 1;
  (void)!write(wake_write_, &one, 1);
  if (thread_.joinable()) thread_.join();
  close(fd_);
  fd_ = -1;
}

}  // namespace kjit::server
