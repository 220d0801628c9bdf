#include "runtime/server/metrics.h"

#include <algorithm>

#include "runtime/kernels/registry.h"

namespace kjit::server {
namespace {

// ModelInfer in the daemon takes 20 us to a few ms (synchronous ones include the kernels).
std::vector<double> LaunchBounds() {
  return {10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 1.0};
}
// An NVRTC compile of one specialization takes 0.5-30 s.
std::vector<double> CompileBounds() { return {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80}; }

}  // namespace

std::string_view LaunchModeName(LaunchMode mode) {
  switch (mode) {
    case LaunchMode::kGrpcSync: return "grpc_sync";
    case LaunchMode::kGrpcAsync: return "grpc_async";
    case LaunchMode::kRingSync: return "ring_sync";
    case LaunchMode::kRingAsync: return "ring_async";
  }
  return "unknown";
}

LaunchMode ModeOf(Transport via, const std::vector<kernels::Param>& params) {
  const bool async = std::any_of(params.begin(), params.end(),
                                 [](const kernels::Param& p) { return p.name == "kjit_signal_event"; });
  if (via == Transport::kRing) return async ? LaunchMode::kRingAsync : LaunchMode::kRingSync;
  return async ? LaunchMode::kGrpcAsync : LaunchMode::kGrpcSync;
}

Histogram::Histogram(std::vector<double> bounds_seconds)
    : bounds_(std::move(bounds_seconds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (double b : bounds_) bounds_ns_.push_back(static_cast<uint64_t>(b * 1e9));
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(uint64_t ns) {
  const size_t i = std::lower_bound(bounds_ns_.begin(), bounds_ns_.end(), ns) - bounds_ns_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(total);
  }
  s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

ModelLaunchMetrics::ModelLaunchMetrics() {
  for (int m = 0; m < kNumLaunchModes; ++m) latency.emplace_back(LaunchBounds());
}

CompileMetrics::CompileMetrics() : seconds(CompileBounds()) {}

ModelLaunchMetrics& LaunchMetricsOf(const kernels::KernelFamily* family) {
  const auto families = kernels::Families();
  // One per family, then the unknown model's; never freed (read by the endpoint until exit).
  static ModelLaunchMetrics* const metrics = new ModelLaunchMetrics[families.size() + 1];
  const size_t i = std::find(families.begin(), families.end(), family) - families.begin();
  return metrics[i];
}

CompileMetrics& CompileMetricsOf() {
  static CompileMetrics* const metrics = new CompileMetrics();
  return *metrics;
}

void RecordLaunch(const kernels::KernelFamily* family, LaunchMode mode, absl::StatusCode code, uint64_t ns) {
  ModelLaunchMetrics& m = LaunchMetricsOf(family);
  m.launches[static_cast<int>(mode)].fetch_add(1, std::memory_order_relaxed);
  const int c = static_cast<int>(code);
  if (code == absl::StatusCode::kOk) {
    m.latency[static_cast<int>(mode)].Observe(ns);
  } else {
    m.failures[c >= 0 && c < kNumStatusCodes ? c : static_cast<int>(absl::StatusCode::kUnknown)].fetch_add(
        1, std::memory_order_relaxed);
  }
}

void RecordCompile(const kernels::CompiledKernel& k) {
  CompileMetrics& m = CompileMetricsOf();
  switch (k.origin) {
    case kernels::CompiledKernel::Origin::kCompiled:
      m.compiled.fetch_add(1, std::memory_order_relaxed);
      m.seconds.Observe(static_cast<uint64_t>(k.compile_ms * 1e6));
      break;
    case kernels::CompiledKernel::Origin::kDiskHit: m.disk_hits.fetch_add(1, std::memory_order_relaxed); break;
    case kernels::CompiledKernel::Origin::kMemoryHit: m.memory_hits.fetch_add(1, std::memory_order_relaxed); break;
  }
}

}  // namespace kjit::server
