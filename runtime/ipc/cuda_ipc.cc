#include "runtime/ipc/cuda_ipc.h"

#include <cstring>

#include "runtime/driver/cuda_driver.h"

namespace kjit::ipc {
namespace {

Status CheckHandleSize(const std::string& raw_handle, const char* what) {
  if (raw_handle.size() != kIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " raw_handle must be exactly ",
                                                   kIpcHandleBytes, " bytes, got ",
                                                   raw_handle.size()));
  }
  return absl::OkStatus();
}

StatusOr<CUcontext> CurrentContext(const driver::Api* api) {
  CUcontext ctx = nullptr;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuCtxGetCurrent(&ctx), "cuCtxGetCurrent"));
  if (ctx == nullptr) return absl::InternalError("no CUDA context current for an IPC open");
  return ctx;
}

// Runs at destruction: the owner may be any thread, so make the owning context current first.
void SetCurrent(const driver::Api* api, CUcontext ctx) { (void)api->cuCtxSetCurrent(ctx); }

}  // namespace

StatusOr<std::unique_ptr<CudaIpcRegion>> CudaIpcRegion::Open(const std::string& raw_handle,
                                                             int device, uint64_t byte_size) {
  KJIT_RETURN_IF_ERROR(CheckHandleSize(raw_handle, "CUDA memory"));
  if (byte_size == 0) return absl::InvalidArgumentError("CUDA region byte_size is 0");
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_ASSIGN_OR_RETURN(CUcontext ctx, CurrentContext(api));
  CUipcMemHandle handle;
  std::memcpy(&handle, raw_handle.data(), kIpcHandleBytes);
  CUdeviceptr base = 0;
  // The flag is required (0 is CUDA_ERROR_INVALID_VALUE): memory of another GPU of the node opens
  // through peer access, and the driver then reports this GPU's ordinal for it (seen on two
  // NVLink-connected H200s), so the daemon cannot tell; clients say which GPU their memory is on
  // with the kjit-device-uuid metadata (runtime/server/sessions.h).
  Status s = driver::Check(api->cuIpcOpenMemHandle(&base, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                           "cuIpcOpenMemHandle");
  if (!s.ok()) {
    // A freed allocation or garbage: the client's error.
    return absl::InvalidArgumentError(absl::StrCat("bad CUDA IPC memory handle: ", s.message()));
  }
  std::unique_ptr<CudaIpcRegion> region(new CudaIpcRegion(ctx, base, byte_size, device));
  CUdeviceptr alloc_base = 0;
  size_t alloc_size = 0;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemGetAddressRange(&alloc_base, &alloc_size, base),
                                     "cuMemGetAddressRange"));  // region's destructor closes
  const uint64_t avail = alloc_size - (base - alloc_base);
  if (byte_size > avail) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA region byte_size ", byte_size,
                                                   " exceeds the allocation's ", avail, " bytes"));
  }
  return region;
}

CudaIpcRegion::~CudaIpcRegion() {
  auto api = driver::Get();
  if (!api.ok() || base_ == 0) return;
  SetCurrent(*api, ctx_);
  (void)(*api)->cuIpcCloseMemHandle(base_);
}

StatusOr<std::unique_ptr<CudaIpcEvent>> CudaIpcEvent::Open(const std::string& raw_handle, int device) {
  KJIT_RETURN_IF_ERROR(CheckHandleSize(raw_handle, "CUDA event"));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_ASSIGN_OR_RETURN(CUcontext ctx, CurrentContext(api));
  CUipcEventHandle handle;
  std::memcpy(&handle, raw_handle.data(), kIpcHandleBytes);
  CUevent event = nullptr;
  Status s = driver::Check(api->cuIpcOpenEventHandle(&event, handle), "cuIpcOpenEventHandle");
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("bad CUDA IPC event handle: ", s.message()));
  }
  return std::unique_ptr<CudaIpcEvent>(new CudaIpcEvent(ctx, event, device));
}

CudaIpcEvent::~CudaIpcEvent() {
  auto api = driver::Get();
  if (!api.ok() || event_ == nullptr) return;
  SetCurrent(*api, ctx_);
  (void)(*api)->cuEventDestroy(event_);
}

}  // namespace kjit::ipc
