// ModelInfer request -> a fully validated launch description (no GPU work yet, except reading
// small device-resident index pointers back to check them). Every tensor's bytes are located:
// inline (raw_input_contents or typed contents), a system region, or a CUDA region, with
// offset/size checked against the region (overflow-safe) and the region held by reference.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inference/grpc_service.pb.h"
#include "runtime/ipc/region_registry.h"
#include "runtime/kernels/mla_verify_schema.h"
#include "runtime/server/daemon.h"
#include "runtime/server/models.h"

namespace kjit::server {

// Positions in kernels::kMlaVerifyInputs of the index pointers the server reads on the host.
inline constexpr int kSlotQoIndptr = 3, kSlotKvIndptr = 4, kSlotMaskIndptr = 8;

struct TensorSource {
  enum class Kind { kInline, kSystem, kCuda } kind = Kind::kInline;
  const uint8_t* host = nullptr;  // kInline: the request's bytes (or `owned`)
  std::string owned;              // typed contents converted to raw bytes
  std::shared_ptr<const ipc::Region> region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

struct ParsedInfer {
  const ModelSpec* model = nullptr;
  std::vector<kernels::TensorDesc> inputs, outputs;
  std::vector<TensorSource> input_src, output_src;
  kernels::MlaVerifyScalars scalars;
  int64_t device = 0;  // kjit_device
  std::string wait_event, signal_event;
  kernels::MlaVerifyLayout layout;
  kernels::MlaVerifyProblem problem;
};

// Validates everything that can be checked without the GPU; the indptr contents are checked too
// when they are inline or in system memory. CUDA-resident indptrs are checked by CheckIndptrs.
StatusOr<ParsedInfer> ParseInferRequest(Daemon* d, const inference::ModelInferRequest& req);

// Reads the index pointers (from wherever they live) and runs the schema's content checks. For
// CUDA-resident ones the region's device context must be current. On success each index pointer's
// source becomes the validated host copy (kInline, region released): the launch stages exactly the
// bytes that were checked, whatever the client writes to its memory afterwards. Asynchronous
// launches (kjit_signal_event) keep CUDA-resident index pointers in place (no host stream sync).
Status CheckIndptrs(ParsedInfer* p);

// The parameter names a client may send that kjit ignores (PROTOCOL.md "reserved").
bool IsReservedParameter(const std::string& name);

}  // namespace kjit::server
