#include "runtime/server/health_service.h"

#include <chrono>
#include <string>

#include "runtime/common/client_text.h"
#include "runtime/ipc/scope.h"
#include "runtime/server/grpc_status.h"
#include "runtime/server/peer.h"

namespace kjit::server {
namespace {

using grpc::health::v1::HealthCheckResponse;

bool KnownService(const std::string& name) {
  return name.empty() || name == "inference.GRPCInferenceService" || name == "kjit.v1.KernelService";
}

}  // namespace

void HealthService::SetServing(bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  if (serving_ == serving) return;
  serving_ = serving;
  ++version_;
  changed_.notify_all();
}

void HealthService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  serving_ = false;
  ++version_;
  changed_.notify_all();
}

HealthService::HealthService() {
  AddMethod(BoundedUnary("/grpc.health.v1.Health/Check", &HealthService::Check, this, nullptr));
  AddMethod(BoundedServerStream("/grpc.health.v1.Health/Watch", &HealthService::Watch, this, nullptr));
}

grpc::Status HealthService::Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest* req,
                                  HealthCheckResponse* resp) {
  if (!KnownService(req->service()))
    return ToGrpc(absl::NotFoundError(absl::StrCat("unknown service '", ClientText(req->service()), "'")));
  std::lock_guard<std::mutex> lock(mu_);
  resp->set_status(serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  const bool known = KnownService(req->service());
  const std::string identity = PeerIdentity(*ctx);
  std::unique_lock<std::mutex> lock(mu_);
  switch (watches_.TryTake(identity)) {
    case IdentitySlots::Taken::kYes:
      break;
    case IdentitySlots::Taken::kLimit:
      return ToGrpc(absl::ResourceExhaustedError(absl::StrCat(
          "kjitd serves at most ", kMaxWatches, " health Watch streams at once: end one, or poll with Check")));
    case IdentitySlots::Taken::kShare:
      return ToGrpc(absl::ResourceExhaustedError(absl::StrCat(
          "this client's user (", identity == "tcp" ? "every TCP client together" : identity, ") has ",
          watches_.Held(identity), " health Watch streams open, ",
          ipc::IdentityShareText(kMaxWatches, "Watch streams"), ": end one, or poll with Check")));
  }
  uint64_t sent = version_ - 1;  // anything but version_: the first status always goes out
  while (!shutdown_ && !ctx->IsCancelled()) {
    if (sent != version_) {
      HealthCheckResponse resp;
      resp.set_status(!known     ? HealthCheckResponse::SERVICE_UNKNOWN
                      : serving_ ? HealthCheckResponse::SERVING
                                 : HealthCheckResponse::NOT_SERVING);
      sent = version_;
      lock.unlock();
      const bool ok = writer->Write(resp);
      lock.lock();
      if (!ok) break;  // the client went away
    }
    // A cancelled client wakes nobody: look again every 100 ms.
    changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  watches_.Give(identity);
  if (shutdown_) return ToGrpc(absl::UnavailableError("kjitd is stopping"));
  return grpc::Status::OK;
}

}  // namespace kjit::server
