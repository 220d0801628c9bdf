// Client sessions (kjit.v1.KernelService/OpenSession). Requests name theirs with the gRPC metadata
// entry `kjit-session`; what they register is released when the session's stream ends.
#pragma once

#include <grpcpp/server_context.h>

#include <map>
#include <mutex>
#include <string>

#include "runtime/common/status.h"
#include "runtime/ipc/registration.h"
#include "runtime/ipc/scope.h"

namespace kjit::server {

inline constexpr char kSessionMetadataKey[] = "kjit-session";
// Optional metadata of CudaSharedMemoryRegister and RegisterEvent: the UUID ("GPU-...", as
// cuDeviceGetUuid / nvidia-smi -L print it) of the GPU the client's memory or event lives on.
// device_id is an ordinal in the daemon's numbering; a client whose CUDA_VISIBLE_DEVICES orders the
// GPUs differently would otherwise register one GPU's memory under another's ordinal, and the driver
// maps it through peer access without complaint (and reports the daemon's ordinal for it).
inline constexpr char kDeviceUuidMetadataKey[] = "kjit-device-uuid";

// OK when the request carries no kjit-device-uuid or names `device`'s GPU; INVALID_ARGUMENT saying
// what to fix otherwise. `what` names the registration ("region 'x'").
Status CheckDeviceUuid(const grpc::ServerContext& ctx, const std::string& what, int device_id,
                       const std::string& device_uuid);

// A session belongs to the connection that opened it (its stream lives on that connection and ends
// with it): a request on another connection that names it is refused as if the session did not
// exist, so an id seen in a log or guessed is of no use to another client.
class SessionTable {
 public:
  static constexpr size_t kDefaultMaxSessions = 256;
  // At most this many open sessions (each holds a thread of the daemon while it lasts), and of them
  // at most ipc::IdentityShare for one user.
  void SetMaxSessions(size_t max_sessions);
  // A fresh, unguessable id for a stream served under `ctx` (cancelled by CancelAll at shutdown);
  // RESOURCE_EXHAUSTED at the cap.
  StatusOr<std::string> Open(const std::string& client_name, grpc::ServerContext* ctx);
  void Close(const std::string& id);
  // Cancels every open session stream so their handlers return (daemon shutdown).
  void CancelAll();
  // Who a request is, for the registry: the session it names ("" when none; NOT_FOUND when it
  // names an unknown one) and its client's identity (PeerIdentity).
  StatusOr<ipc::Scope> ScopeOf(const grpc::ServerContext& ctx) const;
  // Who registers, for ipc::Register*: ScopeOf, and a session_open that asks this table. The
  // caller adds the client's credentials where the kind needs them (system shared memory).
  StatusOr<ipc::Registrant> RegistrantOf(const grpc::ServerContext& ctx) const;
  bool IsOpen(const std::string& id) const;
  size_t Count() const;  // open sessions (status and metrics)
  size_t max_sessions() const { return max_sessions_; }

 private:
  struct Entry {
    std::string client_name;
    grpc::ServerContext* ctx;
    std::string connection;  // gRPC's peer string: "fd:N" on the Unix socket, the address and port on TCP
    std::string identity;    // PeerIdentity of that connection, read once at Open
  };
  mutable std::mutex mu_;
  size_t max_sessions_ = kDefaultMaxSessions;
  std::map<std::string, Entry> open_;
};

}  // namespace kjit::server
