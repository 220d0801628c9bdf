// Launch and compile metrics, recorded where the work happens and read by the Prometheus endpoint
// (metrics_endpoint.h). The launch path pays a few relaxed atomic additions per ModelInfer and
// takes no lock: prometheus-cpp's own Histogram locks a mutex on every Observe, so latencies are
// kept here in fixed buckets and handed to prometheus-cpp as samples when scraped.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/kernels/family.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::server {

enum class Transport { kGrpc, kRing };

// How a ModelInfer reached the launcher, and whether it replied before its kernels ran.
enum class LaunchMode : int { kGrpcSync, kGrpcAsync, kRingSync, kRingAsync };
inline constexpr int kNumLaunchModes = 4;
std::string_view LaunchModeName(LaunchMode mode);  // "grpc_sync", ...

// A cumulative histogram over fixed upper bounds, in seconds; Observe is wait-free.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds_seconds);
  void Observe(uint64_t ns);
  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (== count)
    double sum_seconds = 0;
  };
  Snapshot Read() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> bounds_ns_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds + 1 (the last one: above every bound)
  std::atomic<uint64_t> sum_ns_{0};
};

inline constexpr int kNumStatusCodes = 17;  // absl::StatusCode 0..16, as gRPC's

// One model's (kernel family's) launch counters per mode. Index kNumFamilies (unknown_model) counts
// requests whose model could not be found or decoded.
struct ModelLaunchMetrics {
  ModelLaunchMetrics();
  std::array<std::atomic<uint64_t>, kNumLaunchModes> launches{};
  std::array<std::atomic<uint64_t>, kNumStatusCodes> failures{};  // by status code, any mode
  std::deque<Histogram> latency;  // per mode, successful launches only (a deque: Histogram does not move)
};

struct CompileMetrics {
  CompileMetrics();
  Histogram seconds;  // NVRTC compiles run by this daemon (cache misses)
  std::atomic<uint64_t> compiled{0}, disk_hits{0}, memory_hits{0};
};

// The launch counters of a family of kernels::Families(); null: a request naming no known model.
ModelLaunchMetrics& LaunchMetricsOf(const kernels::KernelFamily* family);
CompileMetrics& CompileMetricsOf();

// The mode of a request that came by `via` with these parameters (asynchronous: kjit_signal_event).
LaunchMode ModeOf(Transport via, const std::vector<kernels::Param>& params);

// One ModelInfer, after its reply is decided (ns: decode to reply).
void RecordLaunch(const kernels::KernelFamily* family, LaunchMode mode, absl::StatusCode code, uint64_t ns);
// One kernel the daemon obtained (startup, Compile, GetKernel): compiled, or a cache hit.
void RecordCompile(const kernels::CompiledKernel& k);

}  // namespace kjit::server
