// Daemon-owned memory that launches reuse on one GPU: the families' workspace, device staging for
// tensors that do not live in CUDA memory, page-locked host staging for their copies, and the
// page-locked blocks of asynchronous launches. Every call holds the device's mutex.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/driver/cuda_driver.h"

namespace kjit::launch {

class DeviceStaging {
 public:
  explicit DeviceStaging(int device_ordinal, CUstream stream) : ordinal_(device_ordinal), stream_(stream) {}

  // Buffers of at least `bytes` (grown, never shrunk; contents not kept), for work queued on the
  // stream after this call. Growing is stream-ordered (the old buffer is freed after the work
  // queued before it, the new one allocated on the stream): no host synchronization, so a launch
  // never waits for asynchronous launches still queued behind a client's event.
  StatusOr<CUdeviceptr> Workspace(size_t bytes) { return Grow(&workspace_, bytes); }
  StatusOr<CUdeviceptr> Staging(size_t bytes) { return Grow(&staging_, bytes); }
  // After a launch: frees a workspace or device staging buffer of more than kKeepBytes (in stream
  // order, after the work queued before it), so that one very large request does not hold GPU
  // memory that the inference process next to kjitd needs, and page-locked host staging of more
  // than kKeepBytes, so that it does not hold the host's. Page-locked staging, and buffers from a
  // device without memory pools, go only once the stream has drained: freeing them waits for the
  // GPU, and the stream may be waiting for a client's event (an asynchronous launch in flight, or a
  // synchronous one abandoned at its deadline, whose copies still use the bytes). Such a buffer
  // goes after a later launch that finds the stream drained.
  static constexpr size_t kKeepBytes = size_t{512} << 20;
  void Trim();
  // What Workspace, Staging and Pinned hold now (bytes), for tests and the curious.
  size_t held_bytes() const;

  // Page-locked host staging of at least `bytes` (grown; Trim shrinks it; contents not kept): the
  // host side of truly asynchronous copies. Every copy queued from or into it must have finished (its
  // stream synchronized) before the device's mutex is released: the next launch reuses the bytes,
  // and growing frees the old ones without waiting for any stream.
  StatusOr<uint8_t*> Pinned(size_t bytes) { return GrowPinned(&pinned_, bytes); }

  // Page-locked host staging for one asynchronous launch's inputs, whose copies run after the call
  // returns (a large copy from pageable memory may first wait for everything queued on the stream:
  // earlier asynchronous launches and the client work they wait for). Blocks of power-of-two sizes
  // from 4 KiB, reused (the smallest free one that fits): the returned pointer's deleter hands its
  // block back, so keep it with the launch until it has run. At most kMaxAsyncBytes are registered;
  // past that, free blocks are released only when `idle` (unregistering waits for the GPU to go
  // idle), else RESOURCE_EXHAUSTED. The last reference must also be dropped under the mutex.
  static constexpr size_t kMaxAsyncBytes = size_t{256} << 20;
  StatusOr<std::shared_ptr<uint8_t>> AcquireAsync(size_t bytes, bool idle);

  // Page-locked host memory mapped into the device, grown like Pinned: its host and device address.
  struct Mapped {
    uint8_t* host = nullptr;
    CUdeviceptr device = 0;
  };
  static StatusOr<Mapped> MapPinned(std::optional<driver::PinnedHostBuffer>* buf, size_t bytes);

 private:
  // Buffers allocated on the stream (driver::DeviceBuffer::AllocOnStream).
  StatusOr<CUdeviceptr> Grow(std::optional<driver::DeviceBuffer>* buf, size_t bytes);
  // Sizes past 4 KiB round up to 1 MiB.
  static StatusOr<uint8_t*> GrowPinned(std::optional<driver::PinnedHostBuffer>* buf, size_t bytes,
                                       unsigned register_flags = 0);

  int ordinal_;
  CUstream stream_;
  std::optional<driver::DeviceBuffer> workspace_, staging_;
  std::optional<driver::PinnedHostBuffer> pinned_;
  // AcquireAsync's blocks and the free ones by size (a launch still holding one must be dropped
  // before this object: DeviceRuntime declares its in-flight launches after it).
  std::vector<driver::PinnedHostBuffer> async_;
  std::multimap<size_t, uint8_t*> free_async_;
  size_t async_bytes_ = 0;  // registered, in use or free
};

}  // namespace kjit::launch
