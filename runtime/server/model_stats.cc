#include "runtime/server/model_stats.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "runtime/kernels/registry.h"

namespace kjit::server {

void ModelCounters::Record(bool ok, uint64_t total_ns, uint64_t compute) {
  (ok ? success_count : fail_count).fetch_add(1, std::memory_order_relaxed);
  (ok ? success_ns : fail_ns).fetch_add(total_ns, std::memory_order_relaxed);
  compute_ns.fetch_add(compute, std::memory_order_relaxed);
  last_inference_ms.store(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count(),
                          std::memory_order_relaxed);
}

ModelCounters& CountersOf(const kernels::KernelFamily* family) {
  const auto families = kernels::Families();
  static ModelCounters* const counters = new ModelCounters[families.size()];
  const size_t i = std::find(families.begin(), families.end(), family) - families.begin();
  return counters[i < families.size() ? i : 0];
}

}  // namespace kjit::server
