// System and CUDA shared memory registration (Triton's shared memory extensions). Both kinds share
// one name space; regions registered with a `kjit-session` die with the session.
#include "runtime/common/client_text.h"
#include "runtime/ipc/registration.h"
#include "runtime/server/grpc_status.h"
#include "runtime/server/inference_service.h"

namespace kjit::server {
namespace {

// What registrations under this call's session need: the session, and whether it is still open
// (asked under the registry's lock, so no region outlives its session).
StatusOr<ipc::Registrant> RegistrantOf(Daemon* d, const grpc::ServerContext& ctx) {
  KJIT_ASSIGN_OR_RETURN(std::string session, d->sessions.SessionOf(ctx));
  return ipc::Registrant{std::move(session), [d](const std::string& s) { return d->sessions.IsOpen(s); }};
}

}  // namespace

grpc::Status InferenceService::SystemSharedMemoryRegister(
    grpc::ServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* req,
    inference::SystemSharedMemoryRegisterResponse*) {
  auto who = RegistrantOf(d_, *ctx);
  if (!who.ok()) return ToGrpc(who.status());
  return ToGrpc(ipc::RegisterSystemRegion(&d_->regions, req->name(), req->key(), req->offset(), req->byte_size(), *who));
}

grpc::Status InferenceService::SystemSharedMemoryUnregister(
    grpc::ServerContext*, const inference::SystemSharedMemoryUnregisterRequest* req,
    inference::SystemSharedMemoryUnregisterResponse*) {
  d_->regions.RemoveRegion(ipc::RegionKind::kSystem, req->name());
  return grpc::Status::OK;
}

grpc::Status InferenceService::SystemSharedMemoryStatus(
    grpc::ServerContext*, const inference::SystemSharedMemoryStatusRequest* req,
    inference::SystemSharedMemoryStatusResponse* resp) {
  auto list = d_->regions.ListRegions(ipc::RegionKind::kSystem, req->name());
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
  auto who = RegistrantOf(d_, *ctx);
  if (!who.ok()) return ToGrpc(who.status());
  return ToGrpc(ipc::RegisterCudaRegion(&d_->regions, req->name(), req->raw_handle(), req->device_id(),
                                        req->byte_size(), DeviceResolverOf(d_, *ctx, "region", req->name()), *who));
}

grpc::Status InferenceService::CudaSharedMemoryUnregister(
    grpc::ServerContext*, const inference::CudaSharedMemoryUnregisterRequest* req,
    inference::CudaSharedMemoryUnregisterResponse*) {
  d_->regions.RemoveRegion(ipc::RegionKind::kCuda, req->name());
  return grpc::Status::OK;
}

grpc::Status InferenceService::CudaSharedMemoryStatus(
    grpc::ServerContext*, const inference::CudaSharedMemoryStatusRequest* req,
    inference::CudaSharedMemoryStatusResponse* resp) {
  auto list = d_->regions.ListRegions(ipc::RegionKind::kCuda, req->name());
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
