// ModelInfer: decode the request into a LaunchRequest, run it through the daemon's launcher,
// encode the result; statistics per model.
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/log.h"
#include "runtime/kernels/registry.h"
#include "runtime/server/fault_inject.h"
#include "runtime/server/grpc_status.h"
#include "runtime/server/infer_decode.h"
#include "runtime/server/inference_service.h"
#include "runtime/server/model_stats.h"
#include "runtime/server/request_cache.h"

namespace kjit::server {

Status InferenceService::Infer(const inference::ModelInferRequest& req, const ipc::Scope& session,
                               inference::ModelInferResponse* resp, Transport via) {
  if (IsFaultInjection(*d_, req)) return InjectFault(d_, req);  // test only (fault_inject.h)
  const auto t0 = std::chrono::steady_clock::now();
  DecodedInfer decoded;
  launch::LaunchResult result;
  Status s = DecodeInferRequest(req, &decoded);
  decoded.request.session = session;
  if (s.ok()) s = d_->launcher.Run(decoded.request, &result);
  const uint64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  if (result.family != nullptr) CountersOf(result.family).Record(s.ok(), ns, result.compute_ns);
  RecordLaunch(result.family, ModeOf(via, decoded.request.params), s.code(), ns);
  if (s.ok()) {
    EncodeInferResponse(req, std::move(result), resp);
  } else {
    resp->Clear();
    if (LogEnabled(LogLevel::kDebug)) Log(LogLevel::kDebug, absl::StrCat("ModelInfer: ", s.ToString()));
  }
  return s;
}

namespace {

thread_local bool t_queue_thread = false;  // MarkQueueThread

// A synchronous launch ordered after a client's event: the launcher waits for it on the host.
bool WaitsOnHost(const inference::ModelInferRequest& req) {
  auto has_string = [&](const char* name) {
    const auto it = req.parameters().find(name);
    return it != req.parameters().end() && it->second.has_string_param() && !it->second.string_param().empty();
  };
  return has_string("kjit_wait_event") && !has_string("kjit_signal_event");
}

}  // namespace

void InferenceService::MarkQueueThread() { t_queue_thread = true; }

bool InferenceService::InferMayWait(const grpc::ByteBuffer& req) const {
  static constexpr std::string_view kWait = "kjit_wait_event";
  // A large request (tensors inline) is answered on the queue's thread, which parses one at a time:
  // each offloaded call holds its request and its parse, several times its bytes, for as long as
  // its wait lasts, and 64 of them could hold 64.
  if (req.Length() > RequestCache::kKeepBytes) return false;
  std::vector<grpc::Slice> slices;
  if (!req.Dump(&slices).ok()) return false;
  auto view = [](const grpc::Slice& s) { return std::string_view(reinterpret_cast<const char*>(s.begin()), s.size()); };
  // The common case, no such parameter, costs a scan of the bytes where they are: each slice, and
  // each seam between two slices (all of them joined where a slice is shorter than the name).
  bool named = false, tiny = false;
  for (const grpc::Slice& s : slices) tiny |= s.size() < kWait.size();
  if (tiny) {
    std::string all;
    for (const grpc::Slice& s : slices) all.append(view(s));
    named = all.find(kWait) != std::string::npos;
  }
  for (size_t i = 0; i < slices.size() && !named && !tiny; ++i) {
    const std::string_view v = view(slices[i]);
    named = v.find(kWait) != std::string_view::npos;
    if (!named && i + 1 < slices.size()) {
      const std::string_view next = view(slices[i + 1]);
      std::string seam(v.substr(v.size() - std::min(v.size(), kWait.size() - 1)));
      seam.append(next.substr(0, std::min(next.size(), kWait.size() - 1)));
      named = seam.find(kWait) != std::string::npos;
    }
  }
  if (!named) return false;
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(view(s));
  inference::ModelInferRequest parsed;  // an invalid request is answered inline, as such
  if ((bytes.size() > InferWireLimits::kWalkAbove && !CheckInferRequestWire(bytes, wire_limits_).ok()) ||
      !parsed.ParseFromString(bytes)) {
    return false;
  }
  return WaitsOnHost(parsed);
}

grpc::Status InferenceService::InferBytes(const grpc::ServerContext& ctx, const grpc::ByteBuffer& req,
                                          grpc::ByteBuffer* resp) {
  auto session = d_->sessions.ScopeOf(ctx);
  if (!session.ok()) return ToGrpc(session.status());
  thread_local RequestCache cache;  // this completion-queue thread's
  std::vector<grpc::Slice> slices;
  if (const grpc::Status dumped = req.Dump(&slices); !dumped.ok()) return dumped;
  std::string* bytes = cache.incoming();
  bytes->clear();
  for (const grpc::Slice& s : slices) bytes->append(reinterpret_cast<const char*>(s.begin()), s.size());
  const StatusOr<const inference::ModelInferRequest*> parsed = cache.Parse(wire_limits_);
  if (!parsed.ok()) {
    cache.Done(0);
    return ToGrpc(parsed.status());
  }
  // Refused here, before the launcher, which would wait for the event on this thread. A request for a
  // model kjitd lacks goes on to the launcher, which answers that at once, without waiting.
  if (t_queue_thread && WaitsOnHost(**parsed) && kernels::FindFamily((*parsed)->model_name()).ok()) {
    const size_t size = req.Length();
    cache.Done(0);
    return ToGrpc(absl::ResourceExhaustedError(
        size > RequestCache::kKeepBytes
            ? absl::StrCat("a synchronous launch with a kjit_wait_event is refused past ", RequestCache::kKeepBytes,
                           " bytes of request (this one: ", size,
                           "): put its tensors in shared memory regions, or launch asynchronously (kjit_signal_event)")
            : std::string("kjitd cannot wait for this launch's kjit_wait_event now: every thread for such waits is "
                          "taken (64, of which one user may hold 48); retry later, or launch asynchronously "
                          "(kjit_signal_event)")));
  }
  inference::ModelInferResponse* out = cache.response();
  const Status s = Infer(**parsed, *session, out);
  grpc::Status status = ToGrpc(s);
  if (s.ok()) {
    bool own_buffer = false;
    status = grpc::SerializationTraits<inference::ModelInferResponse>::Serialize(*out, resp, &own_buffer);
  }
  cache.Done(s.ok() ? resp->Length() : 0);
  return status;
}

}  // namespace kjit::server
