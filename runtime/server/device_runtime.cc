#include "runtime/server/device_runtime.h"

#include "absl/strings/str_cat.h"
#include "runtime/server/log.h"

namespace kjit::server {

StatusOr<std::unique_ptr<DeviceRuntime>> DeviceRuntime::Create(const driver::DeviceInfo& info) {
  KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(info.ordinal));
  KJIT_RETURN_IF_ERROR(ctx.MakeCurrent());
  KJIT_ASSIGN_OR_RETURN(driver::Stream stream, driver::Stream::Create());
  KJIT_ASSIGN_OR_RETURN(driver::Stream readback, driver::Stream::Create());
  return std::unique_ptr<DeviceRuntime>(
      new DeviceRuntime(info, std::move(ctx), std::move(stream), std::move(readback)));
}

StatusOr<CUdeviceptr> DeviceRuntime::Grow(std::optional<driver::DeviceBuffer>* buf, size_t bytes) {
  if (bytes == 0) bytes = 256;
  if (*buf && (*buf)->size() >= bytes) return (*buf)->get();
  // Work queued on the stream may still use the old buffer: it is freed in stream order (or, from
  // a device without memory pools, after the stream has drained).
  if (*buf && !(*buf)->stream_ordered()) KJIT_RETURN_IF_ERROR(stream_.Synchronize());
  buf->reset();
  const size_t rounded = (bytes + (1u << 20) - 1) & ~size_t{(1u << 20) - 1};
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer b, driver::DeviceBuffer::AllocOnStream(rounded, stream_.get()));
  buf->emplace(std::move(b));
  return (*buf)->get();
}

StatusOr<uint8_t*> DeviceRuntime::GrowPinned(std::optional<driver::PinnedHostBuffer>* buf, size_t bytes,
                                              unsigned register_flags) {
  if (*buf && (*buf)->size() >= bytes) return (*buf)->data();
  // No queued copy uses the old buffer: its users synchronize before releasing mu().
  buf->reset();
  constexpr size_t kGranule = size_t{1} << 20;
  const size_t rounded = bytes <= 4096 ? bytes : (bytes + kGranule - 1) & ~(kGranule - 1);
  KJIT_ASSIGN_OR_RETURN(driver::PinnedHostBuffer b, driver::PinnedHostBuffer::Alloc(rounded, register_flags));
  buf->emplace(std::move(b));
  return (*buf)->data();
}

StatusOr<CUdeviceptr> DeviceRuntime::MapPinned(std::optional<driver::PinnedHostBuffer>* buf, size_t bytes) {
  KJIT_RETURN_IF_ERROR(GrowPinned(buf, bytes, CU_MEMHOSTREGISTER_DEVICEMAP).status());
  StatusOr<CUdeviceptr> dev = (*buf)->DevicePointer();
  if (!dev.ok()) buf->reset();
  return dev;
}

StatusOr<DeviceRuntime::MappedWord> DeviceRuntime::MappedErrorWord() {
  if (!mapped_word_) {
    KJIT_ASSIGN_OR_RETURN(mapped_word_device_, MapPinned(&mapped_word_, sizeof(uint32_t)));
  }
  return MappedWord{reinterpret_cast<uint32_t*>(mapped_word_->data()), mapped_word_device_};
}

StatusOr<DeviceRuntime::MappedWord> DeviceRuntime::AcquireErrorWord() {
  if (!async_words_) {
    KJIT_ASSIGN_OR_RETURN(async_words_device_, MapPinned(&async_words_, kMaxAsyncErrorWords * sizeof(uint32_t)));
    uint32_t* words = reinterpret_cast<uint32_t*>(async_words_->data());
    for (size_t i = kMaxAsyncErrorWords; i-- > 0;) free_words_.push_back(words + i);
  }
  if (free_words_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        kMaxAsyncErrorWords, " asynchronous launches are in flight on GPU ", info_.ordinal,
        "; wait for some of them (their kjit_signal_event) before queueing more"));
  }
  uint32_t* w = free_words_.back();
  free_words_.pop_back();
  *static_cast<volatile uint32_t*>(w) = 0;
  const size_t offset = reinterpret_cast<uint8_t*>(w) - async_words_->data();
  return MappedWord{w, async_words_device_ + offset};
}

StatusOr<std::shared_ptr<uint8_t>> DeviceRuntime::AcquireAsyncStaging(size_t bytes) {
  if (bytes > kMaxAsyncStagingBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "an asynchronous launch's inline and system-memory inputs take ", bytes, " bytes; at most ",
        kMaxAsyncStagingBytes, " can be staged: pass large inputs in CUDA regions"));
  }
  size_t size = 4096;
  while (size < bytes) size <<= 1;
  uint8_t* block = nullptr;
  if (auto it = free_staging_.lower_bound(size); it != free_staging_.end()) {  // the smallest that fits
    size = it->first;
    block = it->second;
    free_staging_.erase(it);
  } else {
    if (async_staging_bytes_ + size > kMaxAsyncStagingBytes) {
      // Unregistering page-locked memory waits for the whole GPU to go idle, so free blocks go only
      // while no asynchronous launch is queued (the stream is then idle: synchronous launches leave
      // it synchronized).
      if (!in_flight_.empty()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "asynchronous launches in flight on GPU ", info_.ordinal, " hold page-locked staging up to the ",
            kMaxAsyncStagingBytes, "-byte limit (each launch's inputs rounded up to a power of two), and ", size,
            " more bytes do not fit: wait for them (their kjit_signal_event), or pass large inputs in CUDA regions"));
      }
      while (!free_staging_.empty() && async_staging_bytes_ + size > kMaxAsyncStagingBytes) {
        auto it = free_staging_.begin();
        std::erase_if(async_staging_, [&](const driver::PinnedHostBuffer& b) { return b.data() == it->second; });
        async_staging_bytes_ -= it->first;
        free_staging_.erase(it);
      }
    }
    KJIT_ASSIGN_OR_RETURN(driver::PinnedHostBuffer buf, driver::PinnedHostBuffer::Alloc(size));
    block = buf.data();
    async_staging_bytes_ += buf.size();
    async_staging_.push_back(std::move(buf));
  }
  return std::shared_ptr<uint8_t>(block, [this, size](uint8_t* b) { free_staging_.emplace(size, b); });
}

Status DeviceRuntime::HoldUntilDone(std::vector<std::shared_ptr<const void>> refs, ErrorWatch watch) {
  auto take_event = [this]() -> StatusOr<driver::Event> {
    if (spare_events_.empty()) return driver::Event::Create(CU_EVENT_DISABLE_TIMING);
    driver::Event e = std::move(spare_events_.back());
    spare_events_.pop_back();
    return e;
  };
  KJIT_ASSIGN_OR_RETURN(driver::Event done, take_event());
  Status s = done.Record(stream_.get());
  if (!s.ok()) {
    if (watch.word != nullptr) free_words_.push_back(watch.word);
    return s;
  }
  in_flight_.push_back({std::move(done), std::move(refs), std::move(watch)});
  return absl::OkStatus();
}

void DeviceRuntime::Reap() {
  auto api = driver::Get();
  if (!api.ok()) return;
  // Events complete in stream order: stop at the first one still pending.
  while (!in_flight_.empty() && (*api)->cuEventQuery(in_flight_.front().done.get()) != CUDA_ERROR_NOT_READY) {
    ErrorWatch& w = in_flight_.front().watch;
    if (w.word != nullptr) {
      if (*static_cast<volatile uint32_t*>(w.word) != 0 && w.report) {
        const auto report = std::make_shared<const std::string>(w.report(*w.word));
        Log(LogLevel::kWarn, *report);
        for (const WatchedEvent& e : w.events) async_failures_[e.name] = AsyncFailure{e.registration, report};
      }
      free_words_.push_back(w.word);
    }
    if (spare_events_.size() < 64) spare_events_.push_back(std::move(in_flight_.front().done));  // kept for reuse
    in_flight_.pop_front();
  }
  std::erase_if(async_failures_, [](const auto& kv) { return kv.second.registration.expired(); });
}

std::string DeviceRuntime::TakeAsyncFailure(const std::string& name, const std::shared_ptr<const void>& registration) {
  auto it = async_failures_.find(name);
  if (it == async_failures_.end()) return "";
  if (it->second.registration.lock() != registration) {  // filed under an earlier registration
    async_failures_.erase(it);
    return "";
  }
  const std::shared_ptr<const std::string> report = it->second.report;
  std::erase_if(async_failures_, [&](const auto& kv) { return kv.second.report == report; });
  return *report;
}

}  // namespace kjit::server
