#include "runtime/server/inference_service.h"

#include <string>

#include "absl/strings/str_join.h"
#include "runtime/common/client_text.h"
#include "runtime/kernels/registry.h"
#include "runtime/launch/launcher.h"
#include "runtime/server/grpc_status.h"
#include "runtime/server/token.h"
#include "runtime/server/infer_decode.h"
#include "runtime/server/model_stats.h"

namespace kjit::server {
namespace {

constexpr char kPlatform[] = "kjit";
constexpr char kBackend[] = "nvrtc";

// A model is a kernel family; INVALID_ARGUMENT for an unknown name or a version other than "" / "1".
StatusOr<const kernels::KernelFamily*> FindModel(const std::string& name, const std::string& version) {
  KJIT_ASSIGN_OR_RETURN(const kernels::KernelFamily* f, kernels::FindFamily(name));
  if (!version.empty() && version != kModelVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", name, "' has no version '", ClientText(version), "' (only ", kModelVersion, ")"));
  }
  return f;
}

inference::DataType ConfigType(const std::string& first) {
  if (first == "BOOL") return inference::TYPE_BOOL;
  if (first == "INT32") return inference::TYPE_INT32;
  if (first == "INT64") return inference::TYPE_INT64;
  if (first == "UINT32") return inference::TYPE_UINT32;
  if (first == "FP32") return inference::TYPE_FP32;
  if (first == "BF16") return inference::TYPE_BF16;
  return inference::TYPE_INVALID;
}

}  // namespace

InferenceService::InferenceService(Daemon* d) : d_(d) {
  const std::string* token = d != nullptr ? &d->tcp_token : nullptr;  // null: a test's service without a daemon
  using S = InferenceService;
  auto add = [&](const char* path, auto handler) { AddMethod(BoundedUnary(path, handler, this, token)); };
  add("/inference.GRPCInferenceService/ServerReady", &S::ServerReady);
  add("/inference.GRPCInferenceService/ModelReady", &S::ModelReady);
  add("/inference.GRPCInferenceService/ServerMetadata", &S::ServerMetadata);
  add("/inference.GRPCInferenceService/ModelMetadata", &S::ModelMetadata);
  add("/inference.GRPCInferenceService/ModelConfig", &S::ModelConfig);
  add("/inference.GRPCInferenceService/ModelStatistics", &S::ModelStatistics);
  add("/inference.GRPCInferenceService/RepositoryIndex", &S::RepositoryIndex);
  add("/inference.GRPCInferenceService/RepositoryModelLoad", &S::RepositoryModelLoad);
  add("/inference.GRPCInferenceService/RepositoryModelUnload", &S::RepositoryModelUnload);
  add("/inference.GRPCInferenceService/SystemSharedMemoryStatus", &S::SystemSharedMemoryStatus);
  add("/inference.GRPCInferenceService/SystemSharedMemoryRegister", &S::SystemSharedMemoryRegister);
  add("/inference.GRPCInferenceService/SystemSharedMemoryUnregister", &S::SystemSharedMemoryUnregister);
  add("/inference.GRPCInferenceService/CudaSharedMemoryStatus", &S::CudaSharedMemoryStatus);
  add("/inference.GRPCInferenceService/CudaSharedMemoryRegister", &S::CudaSharedMemoryRegister);
  add("/inference.GRPCInferenceService/CudaSharedMemoryUnregister", &S::CudaSharedMemoryUnregister);
}

grpc::Status InferenceService::RepositoryModelLoad(grpc::ServerContext* ctx,
                                                   const inference::RepositoryModelLoadRequest*,
                                                   inference::RepositoryModelLoadResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "kjitd has no model repository: its models are always loaded");
}

grpc::Status InferenceService::RepositoryModelUnload(grpc::ServerContext* ctx,
                                                     const inference::RepositoryModelUnloadRequest*,
                                                     inference::RepositoryModelUnloadResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "kjitd has no model repository: its models are always loaded");
}

grpc::Status InferenceService::ModelStreamInfer(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<inference::ModelStreamInferResponse, inference::ModelInferRequest>*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "kjitd does not serve ModelStreamInfer (streaming): send each request with ModelInfer (its "
                      "asynchronous launches, kjit_signal_event, reply once queued), or through a launch ring");
}

grpc::Status InferenceService::CheckToken(const grpc::ServerContext& ctx) const {
  return server::CheckToken(ctx, d_->tcp_token);
}

grpc::Status InferenceService::Live(const grpc::ServerContext& ctx, const grpc::ByteBuffer& req,
                                    grpc::ByteBuffer* resp) {
  inference::ServerLiveRequest parsed;
  if (grpc::Status s = ParseControlRequest(ctx, nullptr, req, &parsed); !s.ok()) return s;
  // The same answer every time: serialized once, then shared (a ByteBuffer copy takes references).
  static const grpc::ByteBuffer* const kLive = [] {
    inference::ServerLiveResponse live;
    live.set_live(true);
    auto* bytes = new grpc::ByteBuffer;
    bool own_buffer = false;
    (void)grpc::SerializationTraits<inference::ServerLiveResponse>::Serialize(live, bytes, &own_buffer);
    return bytes;
  }();
  *resp = *kLive;
  return grpc::Status::OK;
}

grpc::Status InferenceService::ServerReady(grpc::ServerContext* ctx, const inference::ServerReadyRequest*,
                                           inference::ServerReadyResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  resp->set_ready(d_->ready.load());
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelReady(grpc::ServerContext* ctx, const inference::ModelReadyRequest* req,
                                          inference::ModelReadyResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  // Unknown models are simply not ready (what Triton answers too).
  resp->set_ready(FindModel(req->name(), req->version()).ok() && d_->ready.load() &&
                  !d_->devices.empty());
  return grpc::Status::OK;
}

grpc::Status InferenceService::ServerMetadata(grpc::ServerContext* ctx,
                                              const inference::ServerMetadataRequest*,
                                              inference::ServerMetadataResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  resp->set_name("kjit");
  resp->set_version(KJIT_VERSION);
  for (const char* ext : {"cuda_shared_memory", "system_shared_memory", "model_configuration",
                          "statistics"}) {
    resp->add_extensions(ext);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelMetadata(grpc::ServerContext* ctx,
                                             const inference::ModelMetadataRequest* req,
                                             inference::ModelMetadataResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto model = FindModel(req->name(), req->version());
  if (!model.ok()) return ToGrpc(model.status());
  resp->set_name(std::string((*model)->name()));
  // A string, not the const char* overload: on that one GCC 12 warns falsely (-Wrestrict).
  resp->add_versions(std::string(kModelVersion));
  resp->set_platform(kPlatform);
  auto fill = [](const kernels::TensorSchema& t, inference::ModelMetadataResponse::TensorMetadata* m) {
    m->set_name(t.name);
    m->set_datatype(t.datatypes.front());
    for (int64_t d : t.shape) m->add_shape(d);
  };
  for (const auto& t : (*model)->inputs()) fill(t, resp->add_inputs());
  for (const auto& t : (*model)->outputs()) fill(t, resp->add_outputs());
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelConfig(grpc::ServerContext* ctx, const inference::ModelConfigRequest* req,
                                           inference::ModelConfigResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto model = FindModel(req->name(), req->version());
  if (!model.ok()) return ToGrpc(model.status());
  inference::ModelConfig* c = resp->mutable_config();
  const kernels::KernelFamily& f = **model;
  c->set_name(std::string(f.name()));
  c->set_platform(kPlatform);
  c->set_backend(kBackend);
  c->set_max_batch_size(0);  // B is a data dimension (qo_indptr), not a Triton batch dimension
  for (const auto& t : f.inputs()) {
    auto* in = c->add_input();
    in->set_name(t.name);
    in->set_data_type(ConfigType(t.datatypes.front()));
    in->set_optional(t.optional);
    for (int64_t d : t.shape) in->add_dims(d);
  }
  std::vector<std::string> optional_outputs;
  for (const auto& t : f.outputs()) {
    auto* out = c->add_output();
    out->set_name(t.name);
    out->set_data_type(ConfigType(t.datatypes.front()));
    for (int64_t d : t.shape) out->add_dims(d);
    if (t.optional) optional_outputs.push_back(t.name);
  }
  std::vector<std::string> params;
  for (const auto& p : f.params()) params.push_back(p.required ? p.name + " (required)" : p.name);
  for (const auto& p : launch::LaunchParamSchema()) params.push_back(p.name);
  (*c->mutable_parameters())["optional_inputs"].set_string_value(std::string(f.optional_inputs_rule()));
  (*c->mutable_parameters())["optional_outputs"].set_string_value(absl::StrJoin(optional_outputs, ", "));
  (*c->mutable_parameters())["request_parameters"].set_string_value(absl::StrJoin(params, ", "));
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelStatistics(grpc::ServerContext* ctx,
                                               const inference::ModelStatisticsRequest* req,
                                               inference::ModelStatisticsResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  std::vector<const kernels::KernelFamily*> which;
  if (req->name().empty()) {
    for (const kernels::KernelFamily* f : kernels::Families()) which.push_back(f);
  } else {
    auto model = FindModel(req->name(), req->version());
    if (!model.ok()) return ToGrpc(model.status());
    which.push_back(*model);
  }
  for (const kernels::KernelFamily* m : which) {
    const ModelCounters& c = CountersOf(m);
    auto* s = resp->add_model_stats();
    s->set_name(std::string(m->name()));
    s->set_version(kModelVersion);
    s->set_last_inference(c.last_inference_ms.load());
    s->set_inference_count(c.success_count.load());
    s->set_execution_count(c.success_count.load());
    auto* is = s->mutable_inference_stats();
    is->mutable_success()->set_count(c.success_count.load());
    is->mutable_success()->set_ns(c.success_ns.load());
    is->mutable_fail()->set_count(c.fail_count.load());
    is->mutable_fail()->set_ns(c.fail_ns.load());
    is->mutable_compute_infer()->set_count(c.success_count.load());
    is->mutable_compute_infer()->set_ns(c.compute_ns.load());
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::RepositoryIndex(grpc::ServerContext* ctx,
                                               const inference::RepositoryIndexRequest* req,
                                               inference::RepositoryIndexResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  const bool ready = d_->ready.load() && !d_->devices.empty();
  for (const kernels::KernelFamily* m : kernels::Families()) {
    if (req->ready() && !ready) continue;
    auto* e = resp->add_models();
    e->set_name(std::string(m->name()));
    e->set_version(kModelVersion);
    e->set_state(ready ? "READY" : "UNAVAILABLE");
    if (!ready) {
      e->set_reason(d_->ready.load() ? d_->compile_only_reason : "starting: kernels not loaded yet");
    }
  }
  return grpc::Status::OK;
}

}  // namespace kjit::server
