// ModelStatistics: launch counters per model (kernel family), updated lock-free.
#pragma once

#include <atomic>
#include <cstdint>

#include "runtime/kernels/family.h"

namespace kjit::server {

struct ModelCounters {
  std::atomic<uint64_t> success_count{0}, success_ns{0};
  std::atomic<uint64_t> fail_count{0}, fail_ns{0};
  std::atomic<uint64_t> compute_ns{0};
  std::atomic<uint64_t> last_inference_ms{0};
  void Record(bool ok, uint64_t total_ns, uint64_t compute);
};

// The counters of a family of kernels::Families().
ModelCounters& CountersOf(const kernels::KernelFamily* family);

}  // namespace kjit::server
