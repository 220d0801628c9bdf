// The page-locked host words, mapped into one device, that launches report their kernels' error
// word into: the kernels store it there (or a copy queued after them does), and the host reads it
// with no copy of its own once the work has run. A synchronous launch uses one word; each
// asynchronous launch in flight holds its own until it is reaped. Every call holds the device's mutex.
#pragma once

#include <cuda.h>

#include <optional>
#include <vector>

#include "runtime/driver/cuda_driver.h"

namespace kjit::launch {

struct MappedWord {
  uint32_t* host = nullptr;
  CUdeviceptr device = 0;
};

class ErrorWords {
 public:
  explicit ErrorWords(int device_ordinal) : ordinal_(device_ordinal) {}
  // The synchronous launches' word, zeroed.
  StatusOr<MappedWord> Sync();
  // A word of an asynchronous launch, zeroed: RESOURCE_EXHAUSTED with kMaxAsync launches in flight.
  static constexpr size_t kMaxAsync = 4096;
  StatusOr<MappedWord> Acquire();
  void Release(uint32_t* word) { free_.push_back(word); }

 private:
  int ordinal_;
  std::optional<driver::PinnedHostBuffer> sync_, async_;
  CUdeviceptr sync_device_ = 0, async_device_ = 0;
  std::vector<uint32_t*> free_;
};

}  // namespace kjit::launch
