// One launch as every transport hands it to the launcher: plain descriptions, no protobuf. The
// gRPC service and the launch ring decode a ModelInferRequest into this (runtime/server); tests and
// tools build it directly.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ipc/scope.h"
#include "runtime/kernels/family.h"

namespace kjit::launch {

// Where one tensor's bytes are. desc.byte_size is their exact size (inputs) or capacity (outputs).
struct TensorArg {
  kernels::TensorDesc desc;
  enum class Kind {
    kHost,    // the caller's memory, valid for the call; an output's bytes come back in the result
    kRegion,  // a registered shared memory region (system or CUDA), looked up after the checks
  } kind = Kind::kHost;
  const uint8_t* host = nullptr;  // kHost input
  std::string region;             // kRegion
  uint64_t offset = 0;            // kRegion: from the region's start
};

struct LaunchRequest {
  std::string model;  // the family's name
  std::string id;     // the client's request id, quoted in reports
  ipc::Scope session;  // who calls (ipc::RegionRegistry's visibility: other sessions' and users' regions are unseen)
  std::vector<TensorArg> inputs, outputs;
  std::vector<kernels::Param> params;  // the family's and the launch layer's (launcher.h)
};

struct LaunchResult {
  const kernels::KernelFamily* family = nullptr;  // set once the model is known (for statistics)
  // Per requested output: its description (name, datatype, shape), and for a kHost output its
  // bytes (empty for outputs written to a region, and for every output of an asynchronous launch).
  std::vector<kernels::TensorDesc> outputs;
  std::vector<std::string> output_bytes;
  uint64_t compute_ns = 0;  // launch to synchronization on the host (synchronous launches)
};

}  // namespace kjit::launch
