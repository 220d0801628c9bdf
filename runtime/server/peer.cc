#include "runtime/server/peer.h"

#include <sys/socket.h>

#include <charconv>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59  // Linux 4.13
#endif

namespace kjit::server {

std::optional<ipc::PeerCredentials> SocketPeerCredentials(int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) return std::nullopt;
  ipc::PeerCredentials out;
  out.uid = cred.uid;
  out.gid = cred.gid;
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      out.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE || bytes <= groups.size() * sizeof(gid_t)) break;  // no groups: primary gid only
    groups.resize(bytes / sizeof(gid_t));
  }
  return out;
}

namespace {

// The descriptor of a call on the Unix socket, from gRPC's peer string "fd:N". It stays open while a
// call on its connection runs (gRPC closes it only when the transport, which every call holds,
// goes), so it cannot name another connection meanwhile.
std::optional<int> UnixFdOf(absl::string_view address) {
  if (!absl::StartsWith(address, "fd:")) return std::nullopt;
  int fd = -1;
  const auto [end, ec] = std::from_chars(address.data() + 3, address.data() + address.size(), fd);
  if (ec != std::errc() || end != address.data() + address.size()) return std::nullopt;
  return fd;
}

}  // namespace

std::string PeerIdentity(const grpc::ServerContext& ctx) {
  const std::string a = ctx.peer();
  if (const std::optional<int> fd = UnixFdOf(a)) {
    struct ucred cred {};
    socklen_t len = sizeof(cred);
    if (getsockopt(*fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof(cred))
      return absl::StrCat("uid:", cred.uid);
  }
  if (absl::StartsWith(a, "fd:")) return "unix:unknown";  // never equal to a user's identity
  if (absl::StartsWith(a, "ipv4:") || absl::StartsWith(a, "ipv6:")) return "tcp";
  return "";
}

Peer PeerOf(const grpc::ServerContext& ctx) {
  Peer p;
  p.address = ctx.peer();
  const absl::string_view a = p.address;
  if (absl::StartsWith(a, "fd:")) {
    if (const std::optional<int> fd = UnixFdOf(a)) {
      p.credentials = SocketPeerCredentials(*fd);
      if (p.credentials) p.transport = Peer::Transport::kUnix;
    }
  } else if (absl::StartsWith(a, "ipv4:") || absl::StartsWith(a, "ipv6:")) {
    p.transport = Peer::Transport::kTcp;
  }
  return p;
}

}  // namespace kjit::server
