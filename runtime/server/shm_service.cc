// System and CUDA shared memory registration (Triton's shared memory extensions). Both kinds share
// one name space per client identity (ipc::RegionRegistry); regions registered with a `kjit-session`
// die with the session.
#include "runtime/common/client_text.h"
#include "runtime/ipc/registration.h"
#include "runtime/server/grpc_status.h"
#include "runtime/server/token.h"
#include "runtime/server/inference_service.h"
#include "runtime/server/peer.h"

namespace kjit::server {
namespace {

// Whose rights decide which system shared memory objects a registration may open. On the Unix
// socket: the client's own (SO_PEERCRED), so that it cannot make kjitd map another user's object.
// Over TCP the client's user is unknown: refused unless --allow-tcp-system-shm says to trust kjitd's
// own rights (then nullopt).
StatusOr<std::optional<ipc::PeerCredentials>> SystemShmRights(const Daemon& d, const grpc::ServerContext& ctx) {
  const Peer peer = PeerOf(ctx);
  if (peer.transport == Peer::Transport::kUnix) return std::optional<ipc::PeerCredentials>(*peer.credentials);
  if (d.flags.allow_tcp_system_shm) return std::optional<ipc::PeerCredentials>();
  return absl::PermissionDeniedError(absl::StrCat(
      "system shared memory registration from ", ClientText(peer.address),
      " is refused: kjitd cannot tell which user a TCP client is, so it could not check that the client may "
      "open the object itself. Connect over the Unix socket, use CUDA shared memory, or start kjitd with "
      "--allow-tcp-system-shm (every TCP client may then map any object kjitd's user can open)"));
}

}  // namespace

grpc::Status InferenceService::SystemSharedMemoryRegister(
    grpc::ServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* req,
    inference::SystemSharedMemoryRegisterResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto who = d_->sessions.RegistrantOf(*ctx);
  if (!who.ok()) return ToGrpc(who.status());
  auto rights = SystemShmRights(*d_, *ctx);
  if (!rights.ok()) return ToGrpc(rights.status());
  who->peer = *std::move(rights);
  return ToGrpc(ipc::RegisterSystemRegion(&d_->regions, req->name(), req->key(), req->offset(), req->byte_size(), *who));
}

grpc::Status InferenceService::SystemSharedMemoryUnregister(
    grpc::ServerContext* ctx, const inference::SystemSharedMemoryUnregisterRequest* req,
    inference::SystemSharedMemoryUnregisterResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto session = d_->sessions.ScopeOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  d_->regions.RemoveRegion(ipc::RegionKind::kSystem, req->name(), *session);
  return grpc::Status::OK;
}

grpc::Status InferenceService::SystemSharedMemoryStatus(
    grpc::ServerContext* ctx, const inference::SystemSharedMemoryStatusRequest* req,
    inference::SystemSharedMemoryStatusResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto session = d_->sessions.ScopeOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  auto list = d_->regions.ListRegions(ipc::RegionKind::kSystem, req->name(), *session);
  if (!list.ok()) return ToGrpc(list.status());
  for (const auto& r : *list) {
    auto& s = (*resp->mutable_regions())[r->name];
    s.set_name(r->name);
    s.set_key(r->system->key());
    s.set_offset(r->system->offset());
    s.set_byte_size(r->system->size());
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::CudaSharedMemoryRegister(
    grpc::ServerContext* ctx, const inference::CudaSharedMemoryRegisterRequest* req,
    inference::CudaSharedMemoryRegisterResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto who = d_->sessions.RegistrantOf(*ctx);
  if (!who.ok()) return ToGrpc(who.status());
  return ToGrpc(ipc::RegisterCudaRegion(&d_->regions, req->name(), req->raw_handle(), req->device_id(),
                                        req->byte_size(), DeviceResolverOf(d_, *ctx, "region", req->name()), *who));
}

grpc::Status InferenceService::CudaSharedMemoryUnregister(
    grpc::ServerContext* ctx, const inference::CudaSharedMemoryUnregisterRequest* req,
    inference::CudaSharedMemoryUnregisterResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto session = d_->sessions.ScopeOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  d_->regions.RemoveRegion(ipc::RegionKind::kCuda, req->name(), *session);
  return grpc::Status::OK;
}

grpc::Status InferenceService::CudaSharedMemoryStatus(
    grpc::ServerContext* ctx, const inference::CudaSharedMemoryStatusRequest* req,
    inference::CudaSharedMemoryStatusResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto session = d_->sessions.ScopeOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  auto list = d_->regions.ListRegions(ipc::RegionKind::kCuda, req->name(), *session);
  if (!list.ok()) return ToGrpc(list.status());
  for (const auto& r : *list) {
    auto& s = (*resp->mutable_regions())[r->name];
    s.set_name(r->name);
    s.set_device_id(static_cast<uint64_t>(r->cuda->device()));
    s.set_byte_size(r->cuda->size());
  }
  return grpc::Status::OK;
}

}  // namespace kjit::server
