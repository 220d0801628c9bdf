// GPU client side of the end-to-end tests and the launch benchmark: what an inference process does
// to use kjitd. A CUDA arena shared with the daemon by IPC handle, a ModelInfer request naming
// tensors in it, and the in-process path (cubins from GetKernel, the same shared plan code).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "inference/grpc_service.grpc.pb.h"
#include "kjit/v1/kernel_service.grpc.pb.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/kernels/mla_verify/schema.h"
#include "tests/reference/mla_reference.h"

namespace kjit::e2e {

// One device allocation with tensors at 256-byte aligned offsets, registered as one CUDA region.
class CudaArena {
 public:
  static StatusOr<std::unique_ptr<CudaArena>> Create(size_t bytes);
  // Reserves `bytes` (at least 1) and returns the offset.
  StatusOr<uint64_t> Reserve(size_t bytes);
  CUdeviceptr base() const { return buf_.get(); }
  size_t size() const { return buf_.size(); }
  StatusOr<std::string> IpcHandle() const;  // the 64 raw bytes of a CUipcMemHandle

 private:
  explicit CudaArena(driver::DeviceBuffer b) : buf_(std::move(b)) {}
  driver::DeviceBuffer buf_;
  size_t used_ = 0;
};

// Where each tensor of one case lives in the arenas, and the problem the daemon will derive.
struct CaseLayout {
  std::vector<kernels::TensorDesc> inputs;   // schema names, datatypes, shapes, byte sizes
  std::vector<uint64_t> input_offsets;       // in the input arena
  std::vector<const void*> input_host;       // host bytes of each input
  uint64_t o_offset = 0, lse_offset = 0;     // in the output arena
  size_t o_bytes = 0, lse_bytes = 0;
  kernels::MlaVerifyProblem problem;         // from the schema, exactly as kjitd computes it
};

// Lays out `c` (reserving space in `in` and `out`) and uploads the inputs synchronously.
StatusOr<CaseLayout> UploadCase(const reference::MlaCase& c, CudaArena* in, CudaArena* out);

// A ModelInfer request for `model` with every tensor in the named CUDA regions. When
// `inline_small` is set, the index pointers, indices and mask travel as raw_input_contents and the
// outputs come back raw instead (the daemon stages them).
inference::ModelInferRequest InferRequest(const std::string& model, const reference::MlaCase& c,
                                          const CaseLayout& l, const std::string& in_region,
                                          const std::string& out_region, int device, bool inline_small);

// Every specialization of both families for `device`, fetched with GetKernel and loaded here.
StatusOr<std::unique_ptr<kernels::LoadedKernels>> LoadKernelsFromDaemon(
    kjit::v1::KernelService::Stub* stub, const driver::DeviceInfo& device);

// In-process launch of `family` on `stream` into separate o/lse buffers; returns o bits and lse.
struct InProcessResult {
  std::vector<uint16_t> o;
  std::vector<float> lse;
};
// The input addresses of a case uploaded at in_base (o, lse and workspace left 0), found by name.
kernels::MlaVerifyBuffers InputBuffers(const CaseLayout& l, CUdeviceptr in_base);

StatusOr<InProcessResult> RunInProcess(const std::string& family, const kernels::KernelTable& kernels,
                                       const driver::DeviceInfo& device, const CaseLayout& l,
                                       CUdeviceptr in_base, CUstream stream);

// A channel with Triton's message limits and fast reconnects.
std::shared_ptr<grpc::Channel> Connect(const std::string& target);

}  // namespace kjit::e2e
