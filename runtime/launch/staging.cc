#include "runtime/launch/staging.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kjit::launch {

StatusOr<CUdeviceptr> DeviceStaging::Grow(std::optional<driver::DeviceBuffer>* buf, size_t bytes) {
  if (bytes == 0) bytes = 256;
  if (*buf && (*buf)->size() >= bytes) return (*buf)->get();
  // Work queued on the stream may still use the old buffer: it is freed in stream order (or, from
  // a device without memory pools, after the stream has drained).
  if (*buf && !(*buf)->stream_ordered()) {
    KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(stream_), "cuStreamSynchronize(grow)"));
  }
  buf->reset();
  const size_t rounded = (bytes + (1u << 20) - 1) & ~size_t{(1u << 20) - 1};
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer b, driver::DeviceBuffer::AllocOnStream(rounded, stream_));
  buf->emplace(std::move(b));
  return (*buf)->get();
}

void DeviceStaging::Trim() {
  // Asked of the driver only where a buffer is oversized: a launch's common case costs no call.
  std::optional<bool> drained;
  auto stream_drained = [&] {
    if (!drained) {
      const StatusOr<const driver::Api*> api = driver::Get();
      drained = api.ok() && (*api)->cuStreamQuery(stream_) == CUDA_SUCCESS;
    }
    return *drained;
  };
  for (std::optional<driver::DeviceBuffer>* buf : {&workspace_, &staging_}) {
    if (*buf && (*buf)->size() > kKeepBytes && ((*buf)->stream_ordered() || stream_drained())) buf->reset();
  }
  if (pinned_ && pinned_->size() > kKeepBytes && stream_drained()) pinned_.reset();
}

size_t DeviceStaging::held_bytes() const {
  size_t n = pinned_ ? pinned_->size() : 0;
  for (const std::optional<driver::DeviceBuffer>* buf : {&workspace_, &staging_}) n += *buf ? (*buf)->size() : 0;
  return n;
}

StatusOr<uint8_t*> DeviceStaging::GrowPinned(std::optional<driver::PinnedHostBuffer>* buf, size_t bytes,
                                             unsigned register_flags) {
  if (*buf && (*buf)->size() >= bytes) return (*buf)->data();
  // No queued copy uses the old buffer: its users synchronize before releasing the device's mutex.
  buf->reset();
  constexpr size_t kGranule = size_t{1} << 20;
  const size_t rounded = bytes <= 4096 ? bytes : (bytes + kGranule - 1) & ~(kGranule - 1);
  KJIT_ASSIGN_OR_RETURN(driver::PinnedHostBuffer b, driver::PinnedHostBuffer::Alloc(rounded, register_flags));
  buf->emplace(std::move(b));
  return (*buf)->data();
}

StatusOr<DeviceStaging::Mapped> DeviceStaging::MapPinned(std::optional<driver::PinnedHostBuffer>* buf,
                                                         size_t bytes) {
  KJIT_ASSIGN_OR_RETURN(uint8_t* host, GrowPinned(buf, bytes, CU_MEMHOSTREGISTER_DEVICEMAP));
  StatusOr<CUdeviceptr> dev = (*buf)->DevicePointer();
  if (!dev.ok()) {
    buf->reset();
    return dev.status();
  }
  return Mapped{host, *dev};
}

StatusOr<std::shared_ptr<uint8_t>> DeviceStaging::AcquireAsync(size_t bytes, bool idle) {
  if (bytes > kMaxAsyncBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "an asynchronous launch's inline and system-memory inputs take ", bytes, " bytes; at most ",
        kMaxAsyncBytes, " can be staged: pass large inputs in CUDA regions"));
  }
  size_t size = 4096;
  while (size < bytes) size <<= 1;
  uint8_t* block = nullptr;
  if (auto it = free_async_.lower_bound(size); it != free_async_.end()) {  // the smallest that fits
    size = it->first;
    block = it->second;
    free_async_.erase(it);
  } else {
    if (async_bytes_ + size > kMaxAsyncBytes) {
      // Unregistering page-locked memory waits for the whole GPU to go idle, so free blocks go only
      // while no asynchronous launch is queued (the stream is then idle: synchronous launches leave
      // it synchronized).
      if (!idle) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "asynchronous launches in flight on GPU ", ordinal_, " hold page-locked staging up to the ",
            kMaxAsyncBytes, "-byte limit (each launch's inputs rounded up to a power of two), and ", size,
            " more bytes do not fit: wait for them (their kjit_signal_event), or pass large inputs in CUDA regions"));
      }
      while (!free_async_.empty() && async_bytes_ + size > kMaxAsyncBytes) {
        auto it = free_async_.begin();
        std::erase_if(async_, [&](const driver::PinnedHostBuffer& b) { return b.data() == it->second; });
        async_bytes_ -= it->first;
        free_async_.erase(it);
      }
    }
    KJIT_ASSIGN_OR_RETURN(driver::PinnedHostBuffer buf, driver::PinnedHostBuffer::Alloc(size));
    block = buf.data();
    async_bytes_ += buf.size();
    async_.push_back(std::move(buf));
  }
  return std::shared_ptr<uint8_t>(block, [this, size](uint8_t* b) { free_async_.emplace(size, b); });
}

}  // namespace kjit::launch
