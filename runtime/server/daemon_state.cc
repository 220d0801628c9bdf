#include "runtime/server/daemon_state.h"

namespace kjit::server {

DaemonState ReadDaemonState(Daemon& d) {
  DaemonState s;
  s.ready = d.ready.load();
  s.poisoned = d.poisoned.load();
  s.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - d.started).count();
  s.sessions = d.sessions.Count();
  const ipc::RegionRegistry::Counts c = d.regions.Count();
  s.system_regions = c.system_regions;
  s.cuda_regions = c.cuda_regions;
  s.events = c.events;
  s.rings = d.rings.Count();
  s.max_sessions = d.sessions.max_sessions();
  s.max_regions = d.regions.max_entries();
  s.max_rings = d.rings.max_rings();
  // StartDaemon fills the device list before `ready`; a poisoned daemon was ready before. Until
  // then the list may still be growing and is not read.
  if (s.ready || s.poisoned) {
    s.compile_only_reason = d.compile_only_reason;
    for (const auto& dev : d.devices) {
      const driver::DeviceInfo& info = dev->info();
      const bool loaded = dev->kernels() != nullptr;
      s.gpus.push_back({info.ordinal, info.arch, info.name, info.uuid, loaded, loaded && !s.poisoned, dev->blocked()});
    }
  }
  return s;
}

}  // namespace kjit::server
