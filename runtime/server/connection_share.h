// Each Unix user's share of the connections kjitd's socket keeps (unix_listener.h). Connections are
// what one client can make kjitd hold most cheaply: each is a descriptor, and past the listener's
// reserve new connections are refused for everyone. So one user may hold at most `cap` of them
// (three quarters of what the reserve leaves, as for kjitd's other limits) and the rest stay
// open to other users.
//
// gRPC closes a connection it was handed without telling the listener, so each one is counted with
// its descriptor and its socket's inode: a counted connection whose descriptor is closed, or now
// names another object, has ended. A user at the cap has the count checked again (at most every
// kRecheck), so connections the user closed make room within that time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <unordered_map>

namespace kjit::server {

class ConnectionShare {
 public:
  using Clock = std::chrono::steady_clock;
  // Whether descriptor `fd` is still the socket of inode `ino`.
  using Alive = std::function<bool(int fd, ino_t ino)>;
  static constexpr std::chrono::milliseconds kRecheck{100};

  ConnectionShare(int cap, Alive alive) : cap_(cap < 1 ? 1 : cap), alive_(std::move(alive)) {}

  // A new connection of `uid` on descriptor `fd` (socket inode `ino`): counted and true, or false
  // (the caller closes it) while `uid` holds `cap` connections that are still open.
  bool Admit(int fd, uid_t uid, ino_t ino, Clock::time_point now);
  // A counted connection the caller closed itself.
  void Forget(int fd);
  int cap() const { return cap_; }
  // Connections counted for `uid` (some may have ended since the last check).
  int CountOf(uid_t uid) const;

  // The kernel's view: fstat of `fd` is a socket with inode `ino`.
  static bool SocketIsOpen(int fd, ino_t ino);

 private:
  struct Conn {
    uid_t uid;
    ino_t ino;
  };
  void Drop(std::unordered_map<int, Conn>::iterator it);
  const int cap_;
  const Alive alive_;
  std::unordered_map<int, Conn> by_fd_;
  std::unordered_map<uid_t, int> by_uid_;
  Clock::time_point checked_{};
};

}  // namespace kjit::server
