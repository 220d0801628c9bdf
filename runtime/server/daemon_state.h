// One consistent read of what the daemon holds, for the DaemonStatus RPC and the Prometheus
// gauges of --metrics-listen: both report the same numbers, taken the same way.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/server/daemon.h"

namespace kjit::server {

struct GpuState {
  int ordinal = 0;
  std::string arch, name, uuid;
  bool kernels_loaded = false;
  bool healthy = false;  // kernels loaded and the daemon not poisoned
  bool blocked = false;  // launches refused until the launch stream drains (DeviceRuntime::blocked)
};

struct DaemonState {
  bool ready = false;
  bool poisoned = false;
  std::string compile_only_reason;  // set once started without a GPU
  double uptime_seconds = 0;
  size_t sessions = 0, system_regions = 0, cuda_regions = 0, events = 0, rings = 0;
  size_t max_sessions = 0, max_regions = 0, max_rings = 0;
  std::vector<GpuState> gpus;  // empty while starting, and in compile-only mode
};

// Takes the registries' locks one at a time (never a device's lock): cheap enough for every scrape.
DaemonState ReadDaemonState(Daemon& d);

}  // namespace kjit::server
