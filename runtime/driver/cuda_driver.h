// The CUDA driver, loaded at run time with dlopen("libcuda.so.1") and cuGetProcAddress; libcuda is
// never linked, so every binary runs (compile-only) on a machine without a driver. RAII owners for
// the handles the project uses; every failure is a Status naming the call and the CUDA error.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"

namespace kjit::driver {

// Typed entry points. Members spell the API names as <cuda.h> maps them (cuMemAlloc ->
// cuMemAlloc_v2, cuGraphInstantiate -> cuGraphInstantiateWithFlags), so api->cuMemAlloc(...) reads
// like the C API. Each entry is requested from cuGetProcAddress at the ABI version (cudaTypedefs.h's
// PFN_<name>_v<version>) whose signature the header declares; driver_api.cc static_asserts that
// every pair matches. (Asking for the newest version instead would, for example, hand back
// CUDA 13's cuCtxSynchronize(CUcontext) behind a cuCtxSynchronize(void) pointer.)
#define KJIT_CU_API_LIST(X)                                                                         \
  X(cuInit, 2000) X(cuDeviceGet, 2000) X(cuDeviceGetCount, 2000)                                  \
  X(cuDeviceGetName, 2000) X(cuDeviceGetAttribute, 2000) X(cuDeviceGetUuid, 11040)                \
  X(cuDeviceTotalMem, 3020) X(cuDevicePrimaryCtxRetain, 7000) X(cuDevicePrimaryCtxRelease, 11000) \
  X(cuCtxSetCurrent, 4000) X(cuCtxGetCurrent, 4000) X(cuCtxSynchronize, 2000)                      \
  X(cuModuleLoadData, 2000) X(cuModuleUnload, 2000) X(cuModuleGetFunction, 2000)                  \
  X(cuFuncGetAttribute, 2020) X(cuFuncSetAttribute, 9000) X(cuLaunchKernel, 4000)                 \
  X(cuLaunchKernelEx, 11060)                                                                      \
  X(cuStreamCreate, 2000) X(cuStreamDestroy, 4000) X(cuStreamSynchronize, 2000) X(cuStreamQuery, 2000) \
  X(cuStreamWaitEvent, 3020) X(cuStreamBeginCapture, 10010) X(cuStreamEndCapture, 10000)          \
  X(cuGraphInstantiateWithFlags, 11040) X(cuGraphLaunch, 10000) X(cuGraphDestroy, 10000)         \
  X(cuGraphExecDestroy, 10000) X(cuEventCreate, 2000) X(cuEventDestroy, 4000)                     \
  X(cuEventRecord, 2000) X(cuEventSynchronize, 2000) X(cuEventElapsedTime, 12080)                 \
  X(cuEventQuery, 2000) X(cuMemAlloc, 3020) X(cuMemFree, 3020) X(cuMemcpyHtoD, 3020)              \
  X(cuMemcpyDtoH, 3020) X(cuMemcpyDtoD, 3020) X(cuMemcpyHtoDAsync, 3020)                          \
  X(cuMemcpyDtoHAsync, 3020) X(cuMemcpyDtoDAsync, 3020) X(cuMemsetD8, 3020)                       \
  X(cuMemsetD8Async, 3020) X(cuMemsetD32Async, 3020) X(cuMemGetAddressRange, 3020)                \
  X(cuIpcGetMemHandle, 4010) X(cuIpcOpenMemHandle, 11000)                                         \
  X(cuIpcCloseMemHandle, 4010) X(cuIpcGetEventHandle, 4010) X(cuIpcOpenEventHandle, 4010)         \
  X(cuGetErrorName, 6000) X(cuGetErrorString, 6000) X(cuMemHostRegister, 6050)                    \
  X(cuMemHostUnregister, 4000) X(cuMemHostGetDevicePointer, 3020) X(cuMemAllocAsync, 11020)      \
  X(cuMemFreeAsync, 11020) X(cuStreamWaitValue32, 11070) X(cuPointerGetAttribute, 4000)                  \
  X(cuStreamIsCapturing, 10000) X(cuPointerGetAttributes, 7000) X(cuFuncGetModule, 11000)            \
  X(cuModuleGetGlobal, 3020)

struct Api {
#define KJIT_CU_API_MEMBER(name, version) decltype(&::name) name = nullptr;
  KJIT_CU_API_LIST(KJIT_CU_API_MEMBER)
#undef KJIT_CU_API_MEMBER
};

// Loads the driver once (thread-safe) and calls cuInit(0). Without a driver:
// FailedPrecondition("compile-only: no CUDA driver (<dlerror text>)"). The result is cached.
StatusOr<const Api*> Get();

// Ok for CUDA_SUCCESS; otherwise a Status whose message is "what: CUDA_ERROR_X (description)".
// Codes: out of memory -> ResourceExhausted, invalid value/handle -> InvalidArgument,
// no device/binary for GPU -> FailedPrecondition, not ready -> Unavailable, else Internal.
Status Check(CUresult r, std::string_view what);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  int cc_major = 0, cc_minor = 0;
  std::string arch;  // "sm_90"
  int sm_count = 0;
  size_t total_mem = 0;
  int max_smem_per_block_optin = 0;
};

// Every visible device; FailedPrecondition (compile-only) without a driver.
StatusOr<std::vector<DeviceInfo>> Devices();

// The primary context of one device, retained for the owner's lifetime.
class Context {
 public:
  static StatusOr<Context> RetainPrimary(int ordinal);
  Context(Context&& other) noexcept;
  Context& operator=(Context&& other) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  Status MakeCurrent() const;
  CUcontext get() const { return ctx_; }
  int ordinal() const { return ordinal_; }

 private:
  Context(CUcontext ctx, CUdevice dev, int ordinal) : ctx_(ctx), dev_(dev), ordinal_(ordinal) {}
  void Reset();
  CUcontext ctx_ = nullptr;
  CUdevice dev_ = 0;
  int ordinal_ = -1;
};

// Streams, events, buffers and modules belong to the context current on the creating thread.
class Stream {
 public:
  static StatusOr<Stream> Create(unsigned flags = CU_STREAM_NON_BLOCKING);
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  CUstream get() const { return stream_; }
  Status Synchronize() const;

 private:
  explicit Stream(CUstream s) : stream_(s) {}
  void Reset();
  CUstream stream_ = nullptr;
};

class Event {
 public:
  static StatusOr<Event> Create(unsigned flags = CU_EVENT_DEFAULT);
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  CUevent get() const { return event_; }
  Status Record(CUstream stream) const;
  Status Synchronize() const;
  static StatusOr<float> ElapsedMs(const Event& start, const Event& end);

 private:
  explicit Event(CUevent e) : event_(e) {}
  void Reset();
  CUevent event_ = nullptr;
};

class DeviceBuffer {
 public:
  static StatusOr<DeviceBuffer> Alloc(size_t bytes);  // bytes > 0
  // Stream-ordered (cuMemAllocAsync on `stream`, freed with cuMemFreeAsync on it, after the work
  // queued before the free); plain cuMemAlloc on a device without memory pools (stream_ordered()
  // false: free it only once the stream's work that uses it has finished). bytes > 0.
  static StatusOr<DeviceBuffer> AllocOnStream(size_t bytes, CUstream stream);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  CUdeviceptr get() const { return ptr_; }
  size_t size() const { return size_; }
  bool stream_ordered() const { return stream_ != nullptr; }
  // Synchronous copies; OutOfRange when [offset, offset + bytes) is not inside the buffer.
  Status CopyFromHost(const void* src, size_t bytes, size_t offset = 0);
  Status CopyToHost(void* dst, size_t bytes, size_t offset = 0) const;
  Status Fill(uint8_t byte);

 private:
  DeviceBuffer(CUdeviceptr p, size_t n, CUstream stream = nullptr) : ptr_(p), size_(n), stream_(stream) {}
  void Reset();
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
  CUstream stream_ = nullptr;  // set: allocated on this stream, freed on it
};

// Page-aligned host memory page-locked with cuMemHostRegister(flags); with
// CU_MEMHOSTREGISTER_DEVICEMAP also mapped into the device (DevicePointer). Unregistered and freed
// on destruction: only once no queued work uses it.
class PinnedHostBuffer {
 public:
  static StatusOr<PinnedHostBuffer> Alloc(size_t bytes, unsigned register_flags = 0);  // rounded up to 4 KiB
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The device address of data() (a buffer registered with CU_MEMHOSTREGISTER_DEVICEMAP).
  StatusOr<CUdeviceptr> DevicePointer() const;

 private:
  PinnedHostBuffer(uint8_t* data, size_t n) : data_(data), size_(n) {}
  void Reset();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class Module {
 public:
  static StatusOr<Module> Load(const std::vector<char>& cubin);
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();

  CUmodule get() const { return module_; }
  StatusOr<CUfunction> Function(const std::string& lowered_name) const;

 private:
  explicit Module(CUmodule m) : module_(m) {}
  void Reset();
  CUmodule module_ = nullptr;
};

// Range check shared by the RAII types and callers: offset + bytes <= size without overflow.
inline bool RangeInside(size_t offset, size_t bytes, size_t size) {
  return offset <= size && bytes <= size - offset;
}

}  // namespace kjit::driver
