// kjitd's command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace kjit::server {

struct Flags {
  std::string socket;               // Unix socket path ("" -> DefaultSocketPath())
  std::string listen;               // HOST:PORT for TCP; "" -> no TCP
  std::string metrics_listen;       // IP:PORT for Prometheus /metrics; "" -> off ("localhost" -> 127.0.0.1)
  std::string cache_dir;            // "" -> the cache's own default
  std::vector<std::string> archs;   // extra archs to compile at startup
  std::string log_level = "info";   // error, warn, info, debug
  int64_t ring_spin_us = 200;       // how long a launch ring's poller spins after a request
  // How long a synchronous launch may wait on the host: for its kjit_wait_event, then for the GPU
  // (launch::Launcher::SetTimeout).
  int64_t launch_timeout_ms = 10000;
  // Over TCP kjitd cannot tell which user a client is, so it refuses system shared memory there
  // unless this is set (then any TCP client may map any object kjitd's user may open).
  bool allow_tcp_system_shm = false;
  int64_t max_request_bytes = int64_t{128} << 20;  // a gRPC message, either way
  int64_t max_regions = 16384;      // registered regions and events together
  int64_t max_sessions = 256;       // open sessions (each holds a thread)
  int64_t max_rings = 64;           // launch rings (each is a poller thread)
  int64_t max_system_shm_bytes = int64_t{64} << 30;  // system shared memory registered at once
  // Bytes a synchronous launch stages on the host and the GPU (launch::Launcher::SetMaxStagingBytes).
  int64_t max_staging_bytes = int64_t{8} << 30;
  // Memory gRPC may hold for every client's calls together (requests being received, parsed and
  // answered): its ResourceQuota. 0: GrpcMemoryBytes' default.
  int64_t max_grpc_memory_bytes = 0;
  // A file holding a shared token that every call over TCP must carry (metadata kjit-token); ""
  // -> none. The Unix socket and the health service need no token (token.h).
  std::string token_file;
  // gRPC server reflection: "auto" (served only where kjitd's own user alone can call), "on" or
  // "off" (ReflectionServed).
  std::string reflection = "auto";
  // Test only: serves the model kjit_fault_inject, whose launch faults on purpose (fault_inject.h).
  bool enable_fault_injection = false;
  bool help = false;
};

// --max-grpc-memory-bytes, or by default max(2 GiB, 4 x --max-request-bytes): a few requests of the
// largest size at once, and not a few hundred (each connection may have one in flight).
int64_t GrpcMemoryBytes(const Flags& f);

// InvalidArgument with a usage hint on a bad flag.
StatusOr<Flags> ParseFlags(int argc, char** argv);
std::string Usage();

// Whether kjitd serves gRPC server reflection. gRPC parses its requests whole, under
// --max-request-bytes, before any check of kjitd's and without the token (a message of undefined
// fields parses to about 18 times its bytes): one client could take the memory every other client's
// calls need. So "auto" serves it only where no one but kjitd's own user can call: no --listen, and
// a Unix socket whose directory only its owner may enter (`socket_private`, SocketIsPrivate).
bool ReflectionServed(const Flags& flags, bool socket_private);

// True when the socket's directory grants its group and others nothing (so only its owner, and
// root, may connect).
bool SocketIsPrivate(const std::string& socket_path);

// True for a --listen on a loopback address (127.x, localhost, [::1]).
bool IsLoopbackListen(const std::string& listen);

// $XDG_RUNTIME_DIR/kjit/kjitd.sock, else /run/kjit/kjitd.sock (when /run/kjit is usable), else
// /tmp/kjit-$UID/kjitd.sock.
std::string DefaultSocketPath();

// Creates the socket's directory (mode 0700 when we create it); refuses a directory another user
// owns or every user may write (without the sticky bit), and a symbolic link another user owns;
// removes a stale socket file left by a dead daemon.
Status PrepareSocketPath(const std::string& path);

}  // namespace kjit::server
