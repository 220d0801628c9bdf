// `kjit`'s connection to a running kjitd (status, cache stats): one channel, a deadline on every
// call, and errors that say which daemon could not be reached.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "health/v1/health.grpc.pb.h"
#include "inference/grpc_service.grpc.pb.h"
#include "kjit/v1/kernel_service.grpc.pb.h"
#include "runtime/common/status.h"

namespace kjit::cli {

class DaemonClient {
 public:
  // target: "unix:///path" or "host:port" ("" -> $KJIT_TARGET, else runtime/common's DefaultDaemonTarget()).
  DaemonClient(const std::string& target, std::chrono::milliseconds deadline);
  const std::string& target() const { return target_; }

  // A fresh context with the deadline (and $KJIT_TOKEN_FILE's token); each call gets its own.
  std::unique_ptr<grpc::ClientContext> Context() const;
  // OK, or the gRPC error as a Status naming `what` and the target. On the first call to a daemon
  // (first_contact), UNAVAILABLE and DEADLINE_EXCEEDED mean no daemon answers there. A
  // $KJIT_TOKEN_FILE that cannot be read is every call's error.
  Status Check(const grpc::Status& s, const char* what, bool first_contact = false) const;

  grpc::health::v1::Health::Stub& health() { return *health_; }
  inference::GRPCInferenceService::Stub& inference() { return *inference_; }
  kjit::v1::KernelService::Stub& kernels() { return *kernels_; }

 private:
  std::string target_;
  std::chrono::milliseconds deadline_;
  std::string token_;     // $KJIT_TOKEN_FILE's, sent with every call
  Status token_status_;  // why $KJIT_TOKEN_FILE could not be read: every call's answer
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> inference_;
  std::unique_ptr<kjit::v1::KernelService::Stub> kernels_;
};

}  // namespace kjit::cli
