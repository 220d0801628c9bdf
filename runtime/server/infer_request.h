// ModelInfer request -> a fully validated launch description (no GPU work: device-resident index
// pointers are read back and checked by the launch, see cuda_copies below). Every tensor's bytes are located:
// inline (raw_input_contents or typed contents), a system region, or a CUDA region, with
// offset/size checked against the region (overflow-safe) and the region held by reference.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "inference/grpc_service.pb.h"
#include "runtime/ipc/region_registry.h"
#include "runtime/kernels/mla_verify_schema.h"
#include "runtime/server/daemon.h"
#include "runtime/server/models.h"

namespace kjit::server {

// Schema positions of the index pointers the server reads on the host, in IndptrCopies' order.
inline constexpr int kIndptrSlots[3] = {kernels::kInQoIndptr, kernels::kInKvIndptr, kernels::kInMaskIndptr};

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
  // kjit_max_draft / kjit_max_prefix: bounds on every D_b / P_b that plan a launch whose index
  // pointers stay on the GPU (PlanUnchecked; 0 / -1: not given).
  int64_t max_draft_hint = 0, max_prefix_hint = -1;
  kernels::MlaVerifyLayout layout;
  kernels::MlaVerifyProblem problem;
};

// Validates everything that can be checked without the GPU except the index pointers' contents
// (CheckIndptrs).
StatusOr<ParsedInfer> ParseInferRequest(Daemon* d, const inference::ModelInferRequest& req);

// Host copies of device-resident index pointers, in the order qo, kv, mask (null: not read back).
using IndptrCopies = std::array<const uint8_t*, 3>;

// Reads the index pointers and runs the schema's content checks. Inline and system-memory ones are
// read here; CUDA-resident ones must come as `cuda_copies` (byte_size bytes each, read back by the
// launch under the device's lock), else INTERNAL. On success each index pointer's source becomes
// the validated host copy (kInline, region released): the launch stages exactly the bytes that
// were checked, whatever the client writes to its memory afterwards.
Status CheckIndptrs(ParsedInfer* p, const IndptrCopies& cuda_copies = {});

// True when an index pointer lives in a CUDA region. A synchronous launch without kjit_max_draft
// reads them back and checks them (CheckIndptrs); an asynchronous one, or one with kjit_max_draft,
// does not wait for them: see PlanUnchecked.
bool HasCudaIndptr(const ParsedInfer& p);

// A launch with index pointers on the GPU that is asynchronous (the client's kjit_wait_event may
// still be producing them) or gives kjit_max_draft: no host check and no host synchronization.
// Sets max_draft and max_prefix from kjit_max_draft / kjit_max_prefix, else from the bounds the
// shapes give (min(N, 64) and M). The kernels check every request against the sizes (a request
// whose D_b exceeds max_draft, or whose extents leave q, kv_indices or the mask, is skipped and
// reported through the error word, never read), and every index pointer is read in place.
void PlanUnchecked(ParsedInfer* p);

// The parameter names a client may send that kjit ignores (PROTOCOL.md "reserved").
bool IsReservedParameter(const std::string& name);

}  // namespace kjit::server
