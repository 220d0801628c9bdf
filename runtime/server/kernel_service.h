// kjit.v1.KernelService: catalog, compile, cubins for in-process launch, cache inspection, IPC
// events and client sessions.
#pragma once

#include "kjit/v1/kernel_service.grpc.pb.h"
#include "runtime/server/bounded_methods.h"
#include "runtime/server/daemon.h"

namespace kjit::server {

// Every method is added again by the constructor, with its request (OpenSession: each message)
// checked before its parse (bounded_methods.h).
namespace kernel_base {
using KS = kjit::v1::KernelService;
using Base = KS::WithGenericMethod_ListKernels<KS::WithGenericMethod_ListDevices<KS::WithGenericMethod_Compile<
    KS::WithGenericMethod_GetKernel<KS::WithGenericMethod_CacheStats<KS::WithGenericMethod_CacheList<
    KS::WithGenericMethod_RegisterEvent<KS::WithGenericMethod_UnregisterEvent<KS::WithGenericMethod_OpenRing<
    KS::WithGenericMethod_CloseRing<KS::WithGenericMethod_DaemonStatus<KS::WithGenericMethod_OpenSession<
    KS::Service>>>>>>>>>>>>;
}  // namespace kernel_base
using KernelServiceBase = kernel_base::Base;

class KernelService final : public KernelServiceBase {
 public:
  explicit KernelService(Daemon* d);

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
  // KernelService/OpenSession. Each SessionRequest comes as bytes (ParseControlRequest): a message
  // past 1 MiB or one that does not parse ends the session with that status.
  grpc::Status ServeSession(grpc::ServerContext*, grpc::ServerReaderWriter<v1::SessionEvent, grpc::ByteBuffer>*);
  // daemon_status.cc
  grpc::Status DaemonStatus(grpc::ServerContext*, const v1::DaemonStatusRequest*,
                            v1::DaemonStatusResponse*) override;

 private:
  Daemon* d_;
};

}  // namespace kjit::server
