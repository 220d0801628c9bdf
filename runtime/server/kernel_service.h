// kjit.v1.KernelService: catalog, compile, cubins for in-process launch, cache inspection, IPC
// events and client sessions.
#pragma once

#include "kjit/v1/kernel_service.grpc.pb.h"
#include "runtime/server/daemon.h"

namespace kjit::server {

class KernelService final : public kjit::v1::KernelService::Service {
 public:
  explicit KernelService(Daemon* d) : d_(d) {}

  grpc::Status ListKernels(grpc::ServerContext*, const v1::ListKernelsRequest*,
                           v1::ListKernelsResponse*) override;
  grpc::Status ListDevices(grpc::ServerContext*, const v1::ListDevicesRequest*, v1::ListDevicesResponse*) override;
  grpc::Status Compile(grpc::ServerContext*, const v1::CompileRequest*,
                       grpc::ServerWriter<v1::CompileProgress>*) override;
  grpc::Status GetKernel(grpc::ServerContext*, const v1::GetKernelRequest*,
                         v1::GetKernelResponse*) override;
  grpc::Status CacheStats(grpc::ServerContext*, const v1::CacheStatsRequest*,
                          v1::CacheStatsResponse*) override;
  grpc::Status CacheList(grpc::ServerContext*, const v1::CacheListRequest*,
                         v1::CacheListResponse*) override;
  grpc::Status RegisterEvent(grpc::ServerContext*, const v1::RegisterEventRequest*,
                             v1::RegisterEventResponse*) override;
  grpc::Status UnregisterEvent(grpc::ServerContext*, const v1::UnregisterEventRequest*,
                               v1::UnregisterEventResponse*) override;
  grpc::Status OpenRing(grpc::ServerContext*, const v1::OpenRingRequest*, v1::OpenRingResponse*) override;
  grpc::Status CloseRing(grpc::ServerContext*, const v1::CloseRingRequest*, v1::CloseRingResponse*) override;
  grpc::Status OpenSession(grpc::ServerContext*,
                           grpc::ServerReaderWriter<v1::SessionEvent, v1::SessionRequest>*) override;
  // daemon_status.cc
  grpc::Status DaemonStatus(grpc::ServerContext*, const v1::DaemonStatusRequest*,
                            v1::DaemonStatusResponse*) override;

 private:
  Daemon* d_;
};

}  // namespace kjit::server
