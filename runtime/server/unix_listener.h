// kjitd's Unix socket. kjitd listens and accepts itself, then hands each connection to gRPC by
// descriptor (grpc::AddInsecureChannelFromFd): gRPC's own Unix listener would hide the descriptor,
// and with it the kernel's word on which user connected (peer.h), which registrations need.
#pragma once

#include <grpcpp/server.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "runtime/common/status.h"

namespace kjit::server {

class UnixListener {
 public:
  // Binds `path` (which must not exist: PrepareSocketPath clears a stale one) with `mode` set
  // before it listens, so no connection is accepted under other permissions; the path appears
  // only once the socket listens (bound as path.<pid>.tmp, then renamed without replacing).
  static StatusOr<std::unique_ptr<UnixListener>> Bind(const std::string& path, mode_t mode);
  ~UnixListener();  // Stop()
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Accepts connections on a thread of its own and gives each to `server` (started) once it has
  // sent its first bytes; one that sends nothing for kFirstBytesWithin is closed (gRPC would keep
  // it, and its descriptor, for good). A connection is refused (closed at once) while fewer than an
  // eighth of RLIMIT_NOFILE (at least 64) descriptors would stay free, so that the clients already
  // connected can still open their shared memory objects and the cache its files; and one user's
  // connection is refused while that user holds three quarters of the rest (connection_share.h).
  void Serve(grpc::Server* server);
  static constexpr std::chrono::seconds kFirstBytesWithin{10};
  // Stops accepting (pending connections are refused) and closes the socket; the path stays.
  void Stop();
  // Connections handed to gRPC so far.
  uint64_t accepted() const { return accepted_.load(); }

 private:
  UnixListener(int fd, int wake_read, int wake_write) : fd_(fd), wake_read_(wake_read), wake_write_(wake_write) {}
  void Loop(grpc::Server* server);
  int fd_, wake_read_, wake_write_;
  std::atomic<uint64_t> accepted_{0};
  std::thread thread_;
};

}  // namespace kjit::server
