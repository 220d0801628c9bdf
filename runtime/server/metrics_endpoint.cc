#include "runtime/server/metrics_endpoint.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <exception>
#include <limits>

#include "runtime/common/log.h"
#include "runtime/kernels/registry.h"
#include "runtime/server/daemon_state.h"
#include "runtime/server/metrics.h"

namespace kjit::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  return MetricFamily{std::move(name), std::move(help), type, {}};
}

void Add(MetricFamily* f, Labels labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  (f->type == MetricType::Counter ? m.counter.value : m.gauge.value) = value;
  f->metric.push_back(std::move(m));
}

void AddHistogram(MetricFamily* f, Labels labels, const Histogram& h) {
  const Histogram::Snapshot s = h.Read();
  ClientMetric m;
  m.label = std::move(labels);
  for (size_t i = 0; i < s.cumulative.size(); ++i) {
    const double bound = i < h.bounds().size() ? h.bounds()[i] : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back({s.cumulative[i], bound});
  }
  m.histogram.sample_count = s.cumulative.back();
  m.histogram.sample_sum = s.sum_seconds;
  f->metric.push_back(std::move(m));
}

void CollectLaunches(std::vector<MetricFamily>* out) {
  MetricFamily launches = Family("kjit_launches_total", "ModelInfer requests (gRPC and launch ring), by model "
                                 "and launch mode, failed ones included", MetricType::Counter);
  MetricFamily failures = Family("kjit_launch_failures_total", "ModelInfer requests that failed, by model and "
                                 "status code (model \"unknown\": not found or not decoded)", MetricType::Counter);
  MetricFamily latency = Family("kjit_launch_latency_seconds", "Daemon time of successful ModelInfer requests, "
                                "decode to reply (synchronous ones include their kernels)", MetricType::Histogram);
  std::vector<std::pair<std::string, const kernels::KernelFamily*>> models;
  for (const kernels::KernelFamily* f : kernels::Families()) models.emplace_back(std::string(f->name()), f);
  models.emplace_back("unknown", nullptr);
  for (const auto& [name, family] : models) {
    const ModelLaunchMetrics& m = LaunchMetricsOf(family);
    for (int mode = 0; mode < kNumLaunchModes; ++mode) {
      const std::string mode_name(LaunchModeName(static_cast<LaunchMode>(mode)));
      Add(&launches, {{"model", name}, {"mode", mode_name}}, m.launches[mode].load(std::memory_order_relaxed));
      if (family != nullptr) AddHistogram(&latency, {{"model", name}, {"mode", mode_name}}, m.latency[mode]);
    }
    for (int c = 1; c < kNumStatusCodes; ++c) {
      const uint64_t n = m.failures[c].load(std::memory_order_relaxed);
      if (n == 0) continue;  // only codes seen, as Triton's counters do
      Add(&failures, {{"model", name}, {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}}, n);
    }
  }
  out->push_back(std::move(launches));
  out->push_back(std::move(failures));
  out->push_back(std::move(latency));
}

void CollectCompiles(std::vector<MetricFamily>* out) {
  const CompileMetrics& m = CompileMetricsOf();
  MetricFamily seconds = Family("kjit_compile_seconds", "NVRTC compiles run by this daemon (cache misses), one "
                                "observation per specialization and arch compiled", MetricType::Histogram);
  AddHistogram(&seconds, {}, m.seconds);
  MetricFamily kernels = Family("kjit_kernels_obtained_total", "Kernels the daemon obtained (startup, Compile, "
                                "GetKernel), by where they came from", MetricType::Counter);
  Add(&kernels, {{"origin", "compiled"}}, m.compiled.load());
  Add(&kernels, {{"origin", "disk"}}, m.disk_hits.load());
  Add(&kernels, {{"origin", "memory"}}, m.memory_hits.load());
  out->push_back(std::move(seconds));
  out->push_back(std::move(kernels));
}

void CollectCache(cache::CubinCache& c, std::vector<MetricFamily>* out) {
  const cache::Stats s = c.stats();
  const auto counter = [out](const char* name, const char* help, Labels labels, double v) {
    MetricFamily f = Family(name, help, MetricType::Counter);
    Add(&f, std::move(labels), v);
    out->push_back(std::move(f));
  };
  MetricFamily hits = Family("kjit_cache_hits_total", "Cubin cache lookups that found their entry, by tier",
                             MetricType::Counter);
  Add(&hits, {{"tier", "memory"}}, s.hits_memory);
  Add(&hits, {{"tier", "disk"}}, s.hits_disk);
  out->push_back(std::move(hits));
  counter("kjit_cache_misses_total", "Cubin cache lookups that found no usable entry", {}, s.misses);
  counter("kjit_cache_evictions_total", "Entries removed by the cache's LRU collection", {}, s.evictions);
  counter("kjit_cache_corrupt_total", "Entry files that failed a check and were removed", {}, s.corrupt);
  counter("kjit_cache_write_failures_total", "Compiled entries that could not be stored", {}, s.write_failures);
  MetricFamily bytes = Family("kjit_cache_bytes", "Bytes of the cache directory's entries", MetricType::Gauge);
  MetricFamily entries = Family("kjit_cache_entries", "Entries in the cache directory", MetricType::Gauge);
  if (auto usage = c.DiskUsage(); usage.ok()) {
    Add(&bytes, {}, usage->bytes);
    Add(&entries, {}, usage->entries);
  }
  MetricFamily cap = Family("kjit_cache_max_bytes", "The cache's byte cap", MetricType::Gauge);
  Add(&cap, {}, c.max_bytes());
  out->push_back(std::move(bytes));
  out->push_back(std::move(entries));
  out->push_back(std::move(cap));
}

void CollectState(Daemon& d, std::vector<MetricFamily>* out) {
  const DaemonState s = ReadDaemonState(d);
  const auto gauge = [out](const char* name, const char* help, double v) {
    MetricFamily f = Family(name, help, MetricType::Gauge);
    Add(&f, {}, v);
    out->push_back(std::move(f));
  };
  gauge("kjit_ready", "1 once the kernels are loaded (health SERVING)", s.ready);
  gauge("kjit_compile_only", "1 when the daemon runs without a GPU", s.ready && s.gpus.empty());
  gauge("kjit_poisoned", "1 when a CUDA context became unusable (the daemon is stopping)", s.poisoned);
  gauge("kjit_uptime_seconds", "Seconds since the daemon started", s.uptime_seconds);
  gauge("kjit_sessions", "Open client sessions", s.sessions);
  gauge("kjit_sessions_max", "--max-sessions", s.max_sessions);
  MetricFamily regions = Family("kjit_regions", "Registered shared memory regions, by kind", MetricType::Gauge);
  Add(&regions, {{"kind", "system"}}, s.system_regions);
  Add(&regions, {{"kind", "cuda"}}, s.cuda_regions);
  out->push_back(std::move(regions));
  gauge("kjit_events", "Registered CUDA IPC events", s.events);
  gauge("kjit_regions_max", "--max-regions (regions and events together)", s.max_regions);
  gauge("kjit_rings", "Launch rings being polled", s.rings);
  gauge("kjit_rings_max", "--max-rings", s.max_rings);
  MetricFamily gpu = Family("kjit_gpu_healthy", "1 when the GPU's kernels are loaded and its context usable",
                            MetricType::Gauge);
  for (const GpuState& g : s.gpus) {
    Add(&gpu, {{"gpu", std::to_string(g.ordinal)}, {"arch", g.arch}, {"uuid", g.uuid}}, g.healthy);
  }
  out->push_back(std::move(gpu));
  MetricFamily blocked = Family("kjit_gpu_blocked",
                                "1 while the GPU refuses launches until its stream drains (behind an asynchronous "
                                "launch's kjit_wait_event that has not completed; kjitd --launch-timeout-ms)",
                                MetricType::Gauge);
  for (const GpuState& g : s.gpus) {
    Add(&blocked, {{"gpu", std::to_string(g.ordinal)}, {"arch", g.arch}, {"uuid", g.uuid}}, g.blocked);
  }
  out->push_back(std::move(blocked));
}

class DaemonCollector final : public prometheus::Collectable {
 public:
  explicit DaemonCollector(Daemon* d) : d_(d) {}
  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out;
    CollectLaunches(&out);
    CollectCompiles(&out);
    // The cache is created by StartDaemon; once ready (or poisoned, which follows ready) it stays.
    if ((d_->ready.load() || d_->poisoned.load()) && d_->cache) CollectCache(*d_->cache, &out);
    CollectState(*d_, &out);
    return out;
  }

 private:
  Daemon* d_;
};

}  // namespace

StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& listen, Daemon* d) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->collector_ = std::make_shared<DaemonCollector>(d);
  try {
    // One thread: scrapes are rare, and the endpoint must not compete with the launch threads.
    e->exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& ex) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", listen, ": cannot listen (", ex.what(),
                                               "; is the port in use?)"));
  }
  e->exposer_->RegisterCollectable(e->collector_);
  Log(LogLevel::kInfo, absl::StrCat("metrics on http://", listen, "/metrics"));
  return e;
}

MetricsEndpoint::~MetricsEndpoint() { exposer_.reset(); }

}  // namespace kjit::server
