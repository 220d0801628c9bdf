// inference.GRPCInferenceService (PROTOCOL.md): health and metadata (inference_service.cc),
// shared memory (shm_service.cc), ModelInfer (model_infer.cc). Unlisted methods: UNIMPLEMENTED.
// ServerLive and ModelInfer are asynchronous methods, answered by grpc_queues.h's threads through
// Live() and InferBytes(); the others are synchronous (bounded_methods.h). The launch ring calls
// Infer().
#pragma once

#include "inference/grpc_service.grpc.pb.h"
#include "runtime/server/bounded_methods.h"
#include "runtime/server/daemon.h"
#include "runtime/server/infer_wire.h"
#include "runtime/server/metrics.h"

namespace kjit::server {

// ServerLive and ModelInfer are raw (their requests and responses as bytes): ModelInfer's handler
// keeps a per-thread RequestCache, so a repeated request is not parsed again. Every other method is
// added again by the constructor, with its request checked before its parse (bounded_methods.h).
namespace inference_base {
using GIS = inference::GRPCInferenceService;
using Base = GIS::WithRawMethod_ServerLive<GIS::WithRawMethod_ModelInfer<
    GIS::WithGenericMethod_ServerReady<GIS::WithGenericMethod_ModelReady<GIS::WithGenericMethod_ServerMetadata<
    GIS::WithGenericMethod_ModelMetadata<GIS::WithGenericMethod_ModelConfig<GIS::WithGenericMethod_ModelStatistics<
    GIS::WithGenericMethod_RepositoryIndex<GIS::WithGenericMethod_RepositoryModelLoad<
    GIS::WithGenericMethod_RepositoryModelUnload<GIS::WithGenericMethod_SystemSharedMemoryStatus<
    GIS::WithGenericMethod_SystemSharedMemoryRegister<GIS::WithGenericMethod_SystemSharedMemoryUnregister<
    GIS::WithGenericMethod_CudaSharedMemoryStatus<GIS::WithGenericMethod_CudaSharedMemoryRegister<
    GIS::WithGenericMethod_CudaSharedMemoryUnregister<GIS::Service>>>>>>>>>>>>>>>>>;
}  // namespace inference_base
using InferenceServiceBase = inference_base::Base;

class InferenceService final : public InferenceServiceBase {
 public:
  explicit InferenceService(Daemon* d);
  // The bound on a ModelInfer's typed contents once parsed (infer_wire.h): --max-request-bytes.
  void SetMaxRequestBytes(uint64_t bytes) { wire_limits_.max_contents_bytes = bytes; }

  // The asynchronous methods' handlers, their requests and responses as bytes (the token is checked
  // by the caller). Live checks its request as the synchronous methods' are (ParseControlRequest).
  // InferBytes parses the request (unless it repeats the calling thread's previous one) and
  // serializes the response itself.
  grpc::Status Live(const grpc::ServerContext& ctx, const grpc::ByteBuffer& req, grpc::ByteBuffer* resp);
  grpc::Status InferBytes(const grpc::ServerContext& ctx, const grpc::ByteBuffer& req, grpc::ByteBuffer* resp);
  // Whether the request is a synchronous launch with a kjit_wait_event: its call may wait up to
  // --launch-timeout-ms for the event, so grpc_queues.cc answers it on a thread of its own. Cheap
  // for every other request (a scan of its bytes for the parameter's name). Never for a request of
  // more than RequestCache::kKeepBytes (tensors inline), which its queue's thread answers.
  bool InferMayWait(const grpc::ByteBuffer& req) const;
  // Marks the calling thread as a completion-queue thread (grpc_queues.cc), which serves every
  // client's ModelInfer and ServerLive: there InferBytes refuses a launch that would wait on the host
  // for a kjit_wait_event (RESOURCE_EXHAUSTED, before any wait), where it used to stall everyone's
  // calls for up to --launch-timeout-ms (a request past RequestCache::kKeepBytes, or no thread left).
  static void MarkQueueThread();
  // token.h's check with the daemon's token, for the asynchronous methods (grpc_queues.cc).
  grpc::Status CheckToken(const grpc::ServerContext& ctx) const;
  // ModelInfer's work, statistics included, for every transport (gRPC, launch rings), in the
  // caller's session ("" outside one: the session's regions are visible only to it).
  Status Infer(const inference::ModelInferRequest& req, const ipc::Scope& session,
               inference::ModelInferResponse* resp, Transport via = Transport::kGrpc);

  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse*) override;
  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest*,
                          inference::ModelReadyResponse*) override;
  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse*) override;
  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest*,
                             inference::ModelMetadataResponse*) override;
  grpc::Status ModelConfig(grpc::ServerContext*, const inference::ModelConfigRequest*,
                           inference::ModelConfigResponse*) override;
  grpc::Status ModelStatistics(grpc::ServerContext*, const inference::ModelStatisticsRequest*,
                               inference::ModelStatisticsResponse*) override;
  grpc::Status RepositoryIndex(grpc::ServerContext*, const inference::RepositoryIndexRequest*,
                               inference::RepositoryIndexResponse*) override;

  // UNIMPLEMENTED: kjitd's one model is always loaded.
  grpc::Status RepositoryModelLoad(grpc::ServerContext*, const inference::RepositoryModelLoadRequest*,
                                   inference::RepositoryModelLoadResponse*) override;
  grpc::Status RepositoryModelUnload(grpc::ServerContext*, const inference::RepositoryModelUnloadRequest*,
                                     inference::RepositoryModelUnloadResponse*) override;
  // Not served: answered UNIMPLEMENTED with what to use instead, without reading a message.
  grpc::Status ModelStreamInfer(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<inference::ModelStreamInferResponse, inference::ModelInferRequest>*) override;

  grpc::Status SystemSharedMemoryStatus(grpc::ServerContext*,
                                        const inference::SystemSharedMemoryStatusRequest*,
                                        inference::SystemSharedMemoryStatusResponse*) override;
  grpc::Status SystemSharedMemoryRegister(grpc::ServerContext*,
                                          const inference::SystemSharedMemoryRegisterRequest*,
                                          inference::SystemSharedMemoryRegisterResponse*) override;
  grpc::Status SystemSharedMemoryUnregister(grpc::ServerContext*,
                                            const inference::SystemSharedMemoryUnregisterRequest*,
                                            inference::SystemSharedMemoryUnregisterResponse*) override;
  grpc::Status CudaSharedMemoryStatus(grpc::ServerContext*,
                                      const inference::CudaSharedMemoryStatusRequest*,
                                      inference::CudaSharedMemoryStatusResponse*) override;
  grpc::Status CudaSharedMemoryRegister(grpc::ServerContext*,
                                        const inference::CudaSharedMemoryRegisterRequest*,
                                        inference::CudaSharedMemoryRegisterResponse*) override;
  grpc::Status CudaSharedMemoryUnregister(grpc::ServerContext*,
                                          const inference::CudaSharedMemoryUnregisterRequest*,
                                          inference::CudaSharedMemoryUnregisterResponse*) override;

 private:
  Daemon* d_;
  InferWireLimits wire_limits_;
};

}  // namespace kjit::server
