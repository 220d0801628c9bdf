// CUDA interprocess handles opened in the daemon: a memory allocation (cudaIpcMemHandle_t) and an
// event (cudaIpcEventHandle_t). Each owns its handle and closes it in its destructor, with the
// owning context made current; every error path of Open closes what it opened.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/common/status.h"

namespace kjit::ipc {

inline constexpr size_t kIpcHandleBytes = 64;

class CudaIpcRegion {
 public:
  // raw_handle must be exactly 64 bytes (INVALID_ARGUMENT otherwise). The context of the device
  // the handle belongs to must be current. byte_size must be > 0 and fit in the allocation as the
  // driver reports it (cuMemGetAddressRange) from the opened base: INVALID_ARGUMENT otherwise.
  static StatusOr<std::unique_ptr<CudaIpcRegion>> Open(const std::string& raw_handle, int device,
                                                       uint64_t byte_size);
  ~CudaIpcRegion();
  CudaIpcRegion(const CudaIpcRegion&) = delete;
  CudaIpcRegion& operator=(const CudaIpcRegion&) = delete;

  CUdeviceptr base() const { return base_; }
  uint64_t size() const { return byte_size_; }
  int device() const { return device_; }

 private:
  CudaIpcRegion(CUcontext ctx, CUdeviceptr base, uint64_t byte_size, int device)
      : ctx_(ctx), base_(base), byte_size_(byte_size), device_(device) {}
  CUcontext ctx_;
  CUdeviceptr base_;
  uint64_t byte_size_;
  int device_;
};

class CudaIpcEvent {
 public:
  // raw_handle must be exactly 64 bytes; the device's context must be current.
  static StatusOr<std::unique_ptr<CudaIpcEvent>> Open(const std::string& raw_handle, int device);
  ~CudaIpcEvent();
  CudaIpcEvent(const CudaIpcEvent&) = delete;
  CudaIpcEvent& operator=(const CudaIpcEvent&) = delete;

  CUevent get() const { return event_; }
  int device() const { return device_; }

 private:
  CudaIpcEvent(CUcontext ctx, CUevent event, int device) : ctx_(ctx), event_(event), device_(device) {}
  CUcontext ctx_;
  CUevent event_;
  int device_;
};

}  // namespace kjit::ipc
