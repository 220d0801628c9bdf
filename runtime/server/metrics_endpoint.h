// --metrics-listen: Prometheus text at http://HOST:PORT/metrics through prometheus-cpp's pull
// Exposer (civetweb). Each scrape reads the launch and compile counters (metrics.h), the cache's
// statistics and the daemon's state (daemon_state.h); nothing is pushed from the launch path.
#pragma once

#include <memory>
#include <string>

#include "runtime/server/daemon.h"

namespace prometheus {
class Exposer;
class Collectable;
}  // namespace prometheus

namespace kjit::server {

class MetricsEndpoint {
 public:
  // Serves `listen` (flags.h's --metrics-listen form) until destroyed; `d` must outlive it.
  // UNAVAILABLE when the address cannot be bound (a port in use, an address not on this host).
  static StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& listen, Daemon* d);
  ~MetricsEndpoint();

 private:
  MetricsEndpoint() = default;
  std::shared_ptr<prometheus::Collectable> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;  // stopped first: no scrape outlives the collector
};

}  // namespace kjit::server
