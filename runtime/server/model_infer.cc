// ModelInfer: parse and validate everything, then pick the GPU and launch.
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/server/grpc_status.h"
#include "runtime/server/infer_launch.h"
#include "runtime/server/inference_service.h"
#include "runtime/server/log.h"
#include "runtime/server/request_cache.h"

namespace kjit::server {
namespace {

Status RunModelInfer(Daemon* d, const inference::ModelInferRequest& req, inference::ModelInferResponse* resp,
             const ModelSpec** model, uint64_t* compute_ns) {
  KJIT_ASSIGN_OR_RETURN(ParsedInfer p, ParseInferRequest(d, req));
  *model = p.model;
  // Index pointers in host memory are checked before a GPU is involved; device-resident ones are
  // read back and checked by the launch, under the device's lock (pinned memory, one stream sync).
  if (!HasCudaIndptr(p)) KJIT_RETURN_IF_ERROR(CheckIndptrs(&p));
  KJIT_ASSIGN_OR_RETURN(DeviceRuntime * dev, d->Device(p.device));
  auto check_device = [&](const kernels::TensorDesc& t, const TensorSource& s) -> Status {
    if (s.kind == TensorSource::Kind::kCuda && s.region->cuda->device() != dev->info().ordinal) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "': region '", s.region->name, "' is on GPU ", s.region->cuda->device(),
          ", the launch runs on GPU ", dev->info().ordinal, " (kjit_device)"));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < p.inputs.size(); ++i) KJIT_RETURN_IF_ERROR(check_device(p.inputs[i], p.input_src[i]));
  for (size_t i = 0; i < p.outputs.size(); ++i) KJIT_RETURN_IF_ERROR(check_device(p.outputs[i], p.output_src[i]));
  resp->set_model_name(p.model->name);
  resp->set_model_version(kModelVersion);
  resp->set_id(req.id());
  Status s = RunInfer(d, dev, &p, resp, compute_ns);
  if (s.code() == absl::StatusCode::kInternal) {  // how driver::Check reports launch failures
    // A sticky CUDA error poisons the context: every later call fails the same way.
    auto api = driver::Get();
    std::lock_guard<std::mutex> lock(dev->mu());
    if (api.ok() && dev->context().MakeCurrent().ok()) {
      const CUresult r = (*api)->cuCtxSynchronize();
      if (r != CUDA_SUCCESS) d->MarkPoisoned(std::string(driver::Check(r, "cuCtxSynchronize").message()));
    }
  }
  return s;
}

}  // namespace

Status InferenceService::Execute(const inference::ModelInferRequest& req, inference::ModelInferResponse* resp) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelSpec* model = nullptr;
  uint64_t compute_ns = 0;
  Status s = RunModelInfer(d_, req, resp, &model, &compute_ns);
  if (model != nullptr) {
    const uint64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - t0).count();
    CountersOf(ModelIndex(model)).Record(s.ok(), ns, compute_ns);
  }
  if (!s.ok()) {
    resp->Clear();
    if (LogEnabled(LogLevel::kDebug)) Log(LogLevel::kDebug, absl::StrCat("ModelInfer: ", s.ToString()));
  }
  return s;
}

grpc::Status InferenceService::InferBytes(const grpc::ByteBuffer& req, grpc::ByteBuffer* resp) {
  thread_local RequestCache cache;  // this completion-queue thread's
  std::vector<grpc::Slice> slices;
  if (const grpc::Status dumped = req.Dump(&slices); !dumped.ok()) return dumped;
  std::string* bytes = cache.incoming();
  bytes->clear();
  for (const grpc::Slice& s : slices) bytes->append(reinterpret_cast<const char*>(s.begin()), s.size());
  const inference::ModelInferRequest* parsed = cache.Parse();
  if (parsed == nullptr) {
    cache.Done(0);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the request is not a serialized inference.ModelInferRequest");
  }
  inference::ModelInferResponse* out = cache.response();
  const Status s = Execute(*parsed, out);
  grpc::Status status = ToGrpc(s);
  if (s.ok()) {
    bool own_buffer = false;
    status = grpc::SerializationTraits<inference::ModelInferResponse>::Serialize(*out, resp, &own_buffer);
  }
  cache.Done(s.ok() ? resp->Length() : 0);
  return status;
}

}  // namespace kjit::server
