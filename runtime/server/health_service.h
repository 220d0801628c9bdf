// grpc.health.v1.Health, answered by the synchronous server. gRPC's default health service uses the
// callback API, whose completion-queue threads (up to 16 on a large host in gRPC 1.51) then compete
// for the socket with every other call: +12-15 us per round trip where the hot methods are async
// (grpc_queues.h). This one starts no threads; a Watch holds one synchronous handler thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "health/v1/health.grpc.pb.h"
#include "runtime/server/bounded_methods.h"
#include "runtime/server/identity_slots.h"

namespace kjit::server {

// Check and Watch are added again by the constructor, with their requests' sizes checked before
// their parse (bounded_methods.h; no token).
class HealthService final
    : public grpc::health::v1::Health::WithGenericMethod_Check<
          grpc::health::v1::Health::WithGenericMethod_Watch<grpc::health::v1::Health::Service>> {
 public:
  HealthService();
  // The status of the server ("") and of its two services: SERVING or NOT_SERVING.
  void SetServing(bool serving);
  // Ends every Watch (before the server shuts down: it waits for its handlers).
  void Shutdown();

  // "" and the daemon's service names are known; any other name is NOT_FOUND (as gRPC's default).
  grpc::Status Check(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::health::v1::HealthCheckResponse* resp) override;
  // Sends the current status, then every change, until the client cancels or the daemon stops.
  // An unknown name reports SERVICE_UNKNOWN (and never changes). Each Watch holds a thread, and the
  // health service answers without a token, so at most kMaxWatches run at once, and of them at most
  // ipc::IdentityShare for one identity (PeerIdentity: a Unix user, or every TCP client together):
  // RESOURCE_EXHAUSTED past either.
  grpc::Status Watch(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;
  static constexpr int kMaxWatches = 64;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool serving_ = false;
  bool shutdown_ = false;
  uint64_t version_ = 0;  // bumped on every change
  IdentitySlots watches_{kMaxWatches};  // Watch calls running
};

}  // namespace kjit::server
