#include "runtime/server/unix_listener.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/common/log.h"
#include "runtime/ipc/scope.h"
#include "runtime/server/connection_share.h"
#include "runtime/server/peer.h"

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

namespace {

using Clock = std::chrono::steady_clock;

int NofileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > (1u << 30)) return 1 << 30;
  return static_cast<int>(r.rlim_cur);
}

}  // namespace

void UnixListener::Loop(grpc::Server* server) {
  // kjitd raised its limit before it listened (server.cc), and nothing lowers it.
  const int limit = NofileLimit();
  const int reserved = std::max(64, limit / 8);
  // Each user's share of the descriptors left for connections (connection_share.h).
  const int for_connections = limit - reserved;
  ConnectionShare share(static_cast<int>(ipc::IdentityShare(for_connections)), ConnectionShare::SocketIsOpen);
  // Accepted connections that have sent nothing yet, with when they were accepted (oldest first).
  struct Waiting {
    int fd;
    Clock::time_point since;
  };
  std::vector<Waiting> waiting;
  std::vector<pollfd> fds;
  auto close_waiting = [&] {
    for (const Waiting& w : waiting) close(w.fd);
  };
  for (;;) {
    fds.assign({{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}});
    for (const Waiting& w : waiting) fds.push_back({w.fd, POLLIN, 0});
    int timeout_ms = -1;
    if (!waiting.empty()) {
      const auto left = waiting.front().since + kFirstBytesWithin - Clock::now();
      timeout_ms = static_cast<int>(std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, absl::StrCat("the Unix socket's accept loop stopped: poll: ", std::strerror(errno)));
      close_waiting();
      return;
    }
    if (fds[1].revents != 0) {
      close_waiting();
      return;
    }
    // Hand over what has spoken (or hung up: gRPC sees the end), close what stayed silent too long.
    const auto now = Clock::now();
    size_t kept = 0;
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (fds[i + 2].revents != 0) {
        accepted_.fetch_add(1);
        grpc::AddInsecureChannelFromFd(server, waiting[i].fd);  // gRPC owns it from here
      } else if (now - waiting[i].since >= kFirstBytesWithin) {
        share.Forget(waiting[i].fd);
        close(waiting[i].fd);
      } else {
        waiting[kept++] = waiting[i];
      }
    }
    waiting.resize(kept);
    if (fds[0].revents == 0) continue;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE, ENFILE, ENOBUFS, ENOMEM: out of descriptors or memory for now. Say so now and
      // then, and wait a little rather than spin.
      LogRateLimited(LogLevel::kWarn, "unix-accept",
                     absl::StrCat("cannot accept a connection on the Unix socket: ", std::strerror(errno)));
      poll(fds.data() + 1, 1, 10);
      continue;
    }
    // Descriptors are allocated lowest first: one this high means nearly every lower one is open.
    if (conn >= limit - reserved) {
      close(conn);
      LogRateLimited(LogLevel::kWarn, "unix-refused",
                     absl::StrCat("refusing connections on the Unix socket: descriptors 0 to ", conn - 1, " of ",
                                  limit, " are open, and ", reserved, " are kept for the clients already connected "
                                  "(raise the process's RLIMIT_NOFILE, or close idle connections)"));
      continue;
    }
    const std::optional<ipc::PeerCredentials> who = SocketPeerCredentials(conn);
    const uid_t uid = who ? who->uid : static_cast<uid_t>(-1);
    struct stat st {};
    if (fstat(conn, &st) != 0 || !share.Admit(conn, uid, st.st_ino, Clock::now())) {
      close(conn);
      LogRateLimited(LogLevel::kWarn, "unix-user-share",
                     absl::StrCat("refusing a connection of uid ", uid, " on the Unix socket: it holds ",
                                  share.CountOf(uid), " connections, ",
                                  ipc::IdentityShareText(for_connections, "the descriptors RLIMIT_NOFILE leaves "
                                                                          "for connections"),
                                  ": close idle connections, or raise RLIMIT_NOFILE"));
      continue;
    }
    waiting.push_back({conn, Clock::now()});
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
