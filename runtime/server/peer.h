// Who is on the other end of a call. kjitd accepts its Unix socket's connections itself
// (unix_listener.h) and hands each to gRPC by file descriptor, so a call's peer names that
// descriptor ("fd:N") and the kernel's SO_PEERCRED / SO_PEERGROUPS say which user connected.
#pragma once

#include <grpcpp/server_context.h>

#include <optional>
#include <string>

#include "runtime/ipc/system_shm_region.h"

namespace kjit::server {

struct Peer {
  enum class Transport { kUnix, kTcp, kOther };
  Transport transport = Transport::kOther;
  std::optional<ipc::PeerCredentials> credentials;  // set for kUnix
  std::string address;                              // gRPC's peer string, for messages
};

Peer PeerOf(const grpc::ServerContext& ctx);

// The identity that owns what a call registers outside a session (ipc::Scope::owner): "uid:N" on
// the Unix socket, "tcp" over TCP (kjitd cannot tell TCP clients apart; the token, when set, admits
// them all alike), "" otherwise. One getsockopt per call on the Unix socket.
std::string PeerIdentity(const grpc::ServerContext& ctx);

// The credentials of a connected Unix socket, or nullopt when the kernel does not give them.
std::optional<ipc::PeerCredentials> SocketPeerCredentials(int fd);

}  // namespace kjit::server
