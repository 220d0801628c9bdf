// Client sessions (kjit.v1.KernelService/OpenSession). Requests name theirs with the gRPC metadata
// entry `kjit-session`; what they register is released when the session's stream ends.
#pragma once

#include <grpcpp/server_context.h>

#include <map>
#include <mutex>
#include <string>

#include "runtime/common/status.h"

namespace kjit::server {

inline constexpr char kSessionMetadataKey[] = "kjit-session";

class SessionTable {
 public:
  // A fresh id for a stream served under `ctx` (cancelled by CancelAll at shutdown).
  std::string Open(const std::string& client_name, grpc::ServerContext* ctx);
  void Close(const std::string& id);
  // Cancels every open session stream so their handlers return (daemon shutdown).
  void CancelAll();
  // The session a request names: "" when none; NOT_FOUND when it names an unknown one.
  StatusOr<std::string> SessionOf(const grpc::ServerContext& ctx) const;
  bool IsOpen(const std::string& id) const;
  size_t size() const;

 private:
  struct Entry {
    std::string client_name;
    grpc::ServerContext* ctx;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> open_;
  uint64_t next_ = 1;
};

}  // namespace kjit::server
