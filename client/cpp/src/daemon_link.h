// The client's connection to kjitd: one gRPC channel, the two services' stubs, an optional session
// (OpenSession, kept open by a thread of its own, so the daemon releases what this process
// registered when it exits or dies), the token kjitd's --token-file asks for over TCP, and a
// deadline on every call. gRPC's channel reconnects by itself when kjitd is restarted; the session
// does not survive a restart: EnsureSession opens a new one and bumps generation(), so that what
// was registered under the old one is registered again (remote.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "inference/grpc_service.grpc.pb.h"
#include "kjit/v1/kernel_service.grpc.pb.h"
#include "runtime/common/status.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::client {

// The longest deadline taken (30 days): larger ones, "forever" included, are cut to it.
inline constexpr int64_t kMaxDeadlineMs = 30LL * 24 * 3600 * 1000;

// PROTOCOL.md's socket: $XDG_RUNTIME_DIR/kjit/kjitd.sock, else /run/kjit/kjitd.sock, else
// /tmp/kjit-$UID/kjitd.sock; the first that exists, else the first candidate.
std::string DefaultTarget();

class DaemonLink {
 public:
  // UNAVAILABLE when the daemon does not answer ServerLive within the deadline.
  // `token` ("": none) goes with every call as metadata kjit-token.
  static StatusOr<std::unique_ptr<DaemonLink>> Connect(const std::string& target, std::chrono::milliseconds deadline,
                                                       const std::string& client_name, bool session,
                                                       const std::string& token = "");
  ~DaemonLink();

  const std::string& target() const { return target_; }
  std::chrono::milliseconds deadline() const { return deadline_; }
  std::string session() const;

  // A context with the deadline, the token and the session's metadata.
  std::unique_ptr<grpc::ClientContext> Context() const;

  // With a session whose stream has ended (kjitd died or restarted), opens a new one and bumps
  // generation(); UNAVAILABLE within the deadline while kjitd does not answer (the next call tries
  // again). OK at once otherwise, and without a session.
  Status EnsureSession();
  // Bumped whenever the session is replaced: registrations made under an older one are gone.
  uint64_t generation() const { return generation_.load(); }

  // Every specialization of `family` for `arch`, as GetKernel returns them. A kernel kjitd compiles
  // for the call is waited for up to the compile deadline ($KJIT_COMPILE_DEADLINE_MS, 10 minutes,
  // at least the deadline) while kjitd answers ServerLive within the deadline.
  StatusOr<std::vector<kernels::CompiledKernel>> GetKernels(std::string_view family, const std::string& arch);
  StatusOr<kjit::v1::ListDevicesResponse> ListDevices();

  inference::GRPCInferenceService::Stub* infer() { return infer_.get(); }
  kjit::v1::KernelService::Stub* kernels() { return kernels_.get(); }

 private:
  DaemonLink() = default;
  Status OpenSession(bool wait_for_connection);
  void CloseSession();

  std::string target_;
  std::string client_name_;
  std::string token_;
  bool want_session_ = false;
  std::chrono::milliseconds deadline_{10000};
  std::chrono::milliseconds compile_deadline_{600000};  // GetKernels: $KJIT_COMPILE_DEADLINE_MS
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> infer_;
  std::unique_ptr<kjit::v1::KernelService::Stub> kernels_;
  mutable std::mutex mu_;  // session_ (read by every call's Context); EnsureSession runs one at a time
  std::mutex ensure_mu_;
  std::string session_;
  std::atomic<bool> session_ended_{false};  // set by session_thread_ when the stream ends
  std::atomic<uint64_t> generation_{0};
  std::unique_ptr<grpc::ClientContext> session_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<kjit::v1::SessionRequest, kjit::v1::SessionEvent>> session_stream_;
  std::thread session_thread_;
};

// A gRPC status as ours (the codes share their numbering).
Status FromGrpc(const grpc::Status& s, std::string_view what);

}  // namespace kjit::client
