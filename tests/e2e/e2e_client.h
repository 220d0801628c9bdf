// The client process of the GPU end-to-end tests and the launch benchmark: a device context, stubs
// for both services, a session, CUDA regions, and the check of one served launch against the
// in-process launch (bitwise) and the float64 reference (tolerance).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/ipc/launch_ring.h"
#include "tests/e2e/gpu_client.h"

namespace kjit::e2e {

struct Client {
  std::string target;
  std::string prefix = "e2e";  // region and event names start with it
  int device = 0;
  driver::DeviceInfo info;
  std::unique_ptr<driver::Context> context;
  std::unique_ptr<driver::Stream> stream;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<inference::GRPCInferenceService::Stub> infer;
  std::unique_ptr<kjit::v1::KernelService::Stub> kernels;
  std::unique_ptr<kernels::LoadedKernels> loaded;  // from GetKernel
  std::string session;                             // "" until OpenSession
  std::unique_ptr<grpc::ClientContext> session_ctx;
  std::unique_ptr<grpc::ClientReaderWriter<kjit::v1::SessionRequest, kjit::v1::SessionEvent>> session_stream;
};

// Driver, device context and stream, channel (waits up to 60 s for the daemon), stubs, kernels.
Status Connect(Client* x, const std::string& target, int device);
Status OpenSession(Client* x, const std::string& client_name);
// Regions <prefix>-in and <prefix>-out, registered under the session when one is open.
struct Arenas {
  std::unique_ptr<CudaArena> in, out;
};
StatusOr<Arenas> MakeArenas(Client* x, size_t in_bytes, size_t out_bytes);
// Registers `arena` as region `name` with device_id = x->device; the daemon's answer as it came.
StatusOr<grpc::Status> TryRegisterCuda(Client* x, const std::string& name, const CudaArena& arena);
Status RegisterEvent(Client* x, const std::string& name, CUevent event);
// The IPC events of an asynchronous launch's ordering, made and registered: "<prefix>-ready" (the
// client's work before the launch) and "<prefix>-done" (the launch).
struct ReadyDone {
  driver::Event ready, done;
};
StatusOr<ReadyDone> MakeReadyDone(Client* x);

grpc::Status Call(Client* x, const inference::ModelInferRequest& req, inference::ModelInferResponse* resp);

// A launch ring (runtime/ipc/launch_ring.h) on `bytes` of POSIX shared memory: region <prefix>-ring,
// registered under the session when one is open, and opened (OpenRing). Unmapped and unlinked on
// destruction.
class LaunchRing {
 public:
  static StatusOr<std::unique_ptr<LaunchRing>> Open(Client* x, size_t bytes);
  ~LaunchRing();
  LaunchRing(const LaunchRing&) = delete;
  LaunchRing& operator=(const LaunchRing&) = delete;
  // ModelInfer through the ring: the call's own status as a gRPC status (DEADLINE_EXCEEDED or
  // INTERNAL when the ring itself failed).
  grpc::Status Infer(const std::string& request_bytes, inference::ModelInferResponse* resp);
  grpc::Status Infer(const inference::ModelInferRequest& req, inference::ModelInferResponse* resp) {
    return Infer(req.SerializeAsString(), resp);
  }

 private:
  LaunchRing(std::string key, void* map, size_t bytes) : key_(std::move(key)), map_(map), bytes_(bytes) {}
  std::string key_;
  void* map_;
  size_t bytes_;
  std::unique_ptr<ipc::RingClient> client_;
};
StatusOr<std::vector<char>> ReadDevice(CUdeviceptr p, size_t bytes);

// The cases the tests run: odd sizes, both mask kinds, chains, bushy and random trees, padding.
std::vector<reference::CaseSpec> Cases();

// One case through one model, outputs in the out region or (inline_small) inline, over gRPC or
// (ring) a launch ring; the result must equal an in-process launch bit for bit and pass the
// reference comparison. Prints a PASS line.
Status CheckCase(Client* x, Arenas& a, const reference::MlaCase& c, const CaseLayout& l,
                 const std::string& model, bool inline_small, LaunchRing* ring = nullptr);

}  // namespace kjit::e2e

#define KJIT_E2E_CHECK(cond, msg)                                                   \
  do {                                                                              \
    if (!(cond)) return absl::InternalError(absl::StrCat("line ", __LINE__, ": ", msg)); \
  } while (0)
