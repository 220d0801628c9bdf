#include "runtime/launch/error_words.h"

#include "absl/strings/str_cat.h"
#include "runtime/launch/staging.h"

namespace kjit::launch {

StatusOr<MappedWord> ErrorWords::Sync() {
  if (!sync_) {
    KJIT_ASSIGN_OR_RETURN(DeviceStaging::Mapped m, DeviceStaging::MapPinned(&sync_, sizeof(uint32_t)));
    sync_device_ = m.device;
  }
  auto* word = reinterpret_cast<uint32_t*>(sync_->data());
  *static_cast<volatile uint32_t*>(word) = 0;  // replaced by the kernels' store or the copy
  return MappedWord{word, sync_device_};
}

StatusOr<MappedWord> ErrorWords::Acquire() {
  if (!async_) {
    KJIT_ASSIGN_OR_RETURN(DeviceStaging::Mapped m, DeviceStaging::MapPinned(&async_, kMaxAsync * sizeof(uint32_t)));
    async_device_ = m.device;
    uint32_t* words = reinterpret_cast<uint32_t*>(m.host);
    for (size_t i = kMaxAsync; i-- > 0;) free_.push_back(words + i);
  }
  if (free_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        kMaxAsync, " asynchronous launches are in flight on GPU ", ordinal_,
        "; wait for some of them (their kjit_signal_event) before queueing more"));
  }
  uint32_t* w = free_.back();
  free_.pop_back();
  *static_cast<volatile uint32_t*>(w) = 0;
  const size_t offset = reinterpret_cast<uint8_t*>(w) - async_->data();
  return MappedWord{w, async_device_ + offset};
}

}  // namespace kjit::launch
