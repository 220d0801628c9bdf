// The client's connection to kjitd: one gRPC channel, the two services' stubs, an optional session
// (OpenSession, kept open by a thread of its own, so the daemon releases what this process
// registered when it exits or dies), and a deadline on every call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "inference/grpc_service.grpc.pb.h"
#include "kjit/v1/kernel_service.grpc.pb.h"
#include "runtime/common/status.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::client {

// PROTOCOL.md's socket: $XDG_RUNTIME_DIR/kjit/kjitd.sock, else /run/kjit/kjitd.sock, else
// /tmp/kjit-$UID/kjitd.sock; the first that exists, else the first candidate.
std::string DefaultTarget();

class DaemonLink {
 public:
  // UNAVAILABLE when the daemon does not answer ServerLive within the deadline.
  static StatusOr<std::unique_ptr<DaemonLink>> Connect(const std::string& target, std::chrono::milliseconds deadline,
                                                       const std::string& client_name, bool session);
  ~DaemonLink();

  const std::string& target() const { return target_; }
  std::chrono::milliseconds deadline() const { return deadline_; }
  const std::string& session() const { return session_; }

  // A context with the deadline and the session's metadata.
  std::unique_ptr<grpc::ClientContext> Context() const;

  // Every specialization of `family` for `arch`, as GetKernel returns them.
  StatusOr<std::vector<kernels::CompiledKernel>> GetKernels(std::string_view family, const std::string& arch);
  StatusOr<kjit::v1::ListDevicesResponse> ListDevices();

  inference::GRPCInferenceService::Stub* infer() { return infer_.get(); }
  kjit::v1::KernelService::Stub* kernels() { return kernels_.get(); }

 private:
  DaemonLink() = default;
  Status OpenSession(const std::string& client_name);

  std::string target_;
  std::chrono::milliseconds deadline_{10000};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> infer_;
  std::unique_ptr<kjit::v1::KernelService::Stub> kernels_;
  std::string session_;
  grpc::ClientContext session_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<kjit::v1::SessionRequest, kjit::v1::SessionEvent>> session_stream_;
  std::thread session_thread_;
};

// A gRPC status as ours (the codes share their numbering).
Status FromGrpc(const grpc::Status& s, std::string_view what);

}  // namespace kjit::client
