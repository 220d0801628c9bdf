// System and CUDA shared memory registration (Triton's shared memory extensions). Both kinds share
// one name space; regions registered with a `kjit-session` die with the session.
#include "runtime/server/grpc_status.h"
#include "runtime/server/inference_service.h"

namespace kjit::server {
namespace {

// Adds the region unless its session has ended meanwhile (checked under the registry's lock).
Status AddRegion(Daemon* d, std::shared_ptr<ipc::Region> region) {
  return d->regions.AddRegion(std::move(region), [d](const std::string& s) { return d->sessions.IsOpen(s); });
}

}  // namespace

grpc::Status InferenceService::SystemSharedMemoryRegister(
    grpc::ServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* req,
    inference::SystemSharedMemoryRegisterResponse*) {
  auto session = d_->sessions.SessionOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  if (req->name().empty()) return ToGrpc(absl::InvalidArgumentError("region name is empty"));
  if (d_->regions.FindRegion(req->name()).ok()) {  // before mapping anything
    return ToGrpc(absl::AlreadyExistsError(
        absl::StrCat("shared memory region '", req->name(), "' is already registered")));
  }
  auto shm = ipc::SystemShmRegion::Open(req->key(), req->offset(), req->byte_size());
  if (!shm.ok()) return ToGrpc(WithContext(shm.status(), absl::StrCat("region '", req->name(), "'")));
  auto region = std::make_shared<ipc::Region>();
  region->name = req->name();
  region->session = *session;
  region->system = *std::move(shm);
  return ToGrpc(AddRegion(d_, std::move(region)));
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
  auto session = d_->sessions.SessionOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  if (req->name().empty()) return ToGrpc(absl::InvalidArgumentError("region name is empty"));
  if (req->raw_handle().size() != ipc::kIpcHandleBytes) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
        "region '", req->name(), "': raw_handle must be exactly ", ipc::kIpcHandleBytes,
        " bytes (a cudaIpcMemHandle_t), got ", req->raw_handle().size())));
  }
  if (req->byte_size() == 0) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat("region '", req->name(), "': byte_size is 0")));
  }
  auto dev = d_->Device(req->device_id());
  if (!dev.ok()) return ToGrpc(dev.status());
  if (Status s = CheckDeviceUuid(*ctx, absl::StrCat("region '", req->name(), "'"),
                                 static_cast<int>(req->device_id()), (*dev)->info().uuid);
      !s.ok()) {
    return ToGrpc(s);
  }
  if (d_->regions.FindRegion(req->name()).ok()) {
    return ToGrpc(absl::AlreadyExistsError(
        absl::StrCat("shared memory region '", req->name(), "' is already registered")));
  }
  Status current = (*dev)->context().MakeCurrent();
  if (!current.ok()) return ToGrpc(current);
  auto cuda = ipc::CudaIpcRegion::Open(req->raw_handle(), static_cast<int>(req->device_id()),
                                       req->byte_size());
  if (!cuda.ok()) return ToGrpc(WithContext(cuda.status(), absl::StrCat("region '", req->name(), "'")));
  auto region = std::make_shared<ipc::Region>();
  region->name = req->name();
  region->session = *session;
  region->cuda = *std::move(cuda);
  // A concurrent register of the same name loses here; its handle closes with `region`.
  return ToGrpc(AddRegion(d_, std::move(region)));
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
