#include "runtime/server/connection_share.h"

#include <sys/stat.h>

#include <iterator>

namespace kjit::server {

void ConnectionShare::Drop(std::unordered_map<int, Conn>::iterator it) {
  const auto u = by_uid_.find(it->second.uid);
  if (u != by_uid_.end() && --u->second <= 0) by_uid_.erase(u);
  by_fd_.erase(it);
}

bool ConnectionShare::Admit(int fd, uid_t uid, ino_t ino, Clock::time_point now) {
  // The descriptor's number was free for accept to return: whatever was counted under it has ended.
  if (const auto it = by_fd_.find(fd); it != by_fd_.end()) Drop(it);
  if (CountOf(uid) >= cap_ && now - checked_ >= kRecheck) {
    checked_ = now;
    for (auto it = by_fd_.begin(); it != by_fd_.end();) {
      const auto next = std::next(it);
      if (!alive_(it->first, it->second.ino)) Drop(it);
      it = next;
    }
  }
  if (CountOf(uid) >= cap_) return false;
  by_fd_.emplace(fd, Conn{uid, ino});
  ++by_uid_[uid];
  return true;
}

void ConnectionShare::Forget(int fd) {
  if (const auto it = by_fd_.find(fd); it != by_fd_.end()) Drop(it);
}

int ConnectionShare::CountOf(uid_t uid) const {
  const auto it = by_uid_.find(uid);
  return it == by_uid_.end() ? 0 : it->second;
}

bool ConnectionShare::SocketIsOpen(int fd, ino_t ino) {
  struct stat st {};
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ino;
}

}  // namespace kjit::server
