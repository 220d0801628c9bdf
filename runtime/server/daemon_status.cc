// KernelService.DaemonStatus: daemon_state.h's snapshot on the wire (`kjit status`).
#include "runtime/server/daemon_state.h"
#include "runtime/server/kernel_service.h"
#include "runtime/server/token.h"

namespace kjit::server {

grpc::Status KernelService::DaemonStatus(grpc::ServerContext* ctx, const v1::DaemonStatusRequest*,
                                         v1::DaemonStatusResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  const DaemonState s = ReadDaemonState(*d_);
  resp->set_version(KJIT_VERSION);
  resp->set_ready(s.ready);
  resp->set_poisoned(s.poisoned);
  resp->set_compile_only_reason(s.compile_only_reason);
  resp->set_uptime_seconds(s.uptime_seconds);
  resp->set_sessions(s.sessions);
  resp->set_system_regions(s.system_regions);
  resp->set_cuda_regions(s.cuda_regions);
  resp->set_events(s.events);
  resp->set_rings(s.rings);
  resp->set_max_sessions(s.max_sessions);
  resp->set_max_regions(s.max_regions);
  resp->set_max_rings(s.max_rings);
  resp->set_metrics_listen(d_->flags.metrics_listen);
  for (const GpuState& g : s.gpus) {
    v1::GpuHealth* out = resp->add_gpus();
    out->set_ordinal(g.ordinal);
    out->set_arch(g.arch);
    out->set_kernels_loaded(g.kernels_loaded);
    out->set_healthy(g.healthy);
    out->set_blocked(g.blocked);
  }
  return grpc::Status::OK;
}

}  // namespace kjit::server
