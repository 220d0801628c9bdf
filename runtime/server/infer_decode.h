// ModelInferRequest -> launch::LaunchRequest, and launch::LaunchResult -> ModelInferResponse: the
// only place a ModelInfer's protobuf meets the launch layer. Decoding checks only the protocol
// (where each tensor's bytes are, the parameters' wire types, reserved names); the family's checks
// and every memory lookup happen in the launcher.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inference/grpc_service.pb.h"
#include "runtime/launch/launch_request.h"

namespace kjit::server {

inline constexpr char kModelVersion[] = "1";

struct DecodedInfer {
  launch::LaunchRequest request;
  // Typed contents converted to raw bytes; TensorArg::host points into them (each kept in place).
  std::vector<std::unique_ptr<std::string>> owned;
};

// INVALID_ARGUMENT for an unknown model or version, a malformed tensor or parameter. The request's
// raw contents must outlive `out` (its tensors point into them).
Status DecodeInferRequest(const inference::ModelInferRequest& req, DecodedInfer* out);

// One output entry per requested output, in order, with its real shape, and one raw_output_contents
// entry per output (empty for outputs written to shared memory: Triton's C++ client indexes it
// without a bounds check).
void EncodeInferResponse(const inference::ModelInferRequest& req, launch::LaunchResult result,
                         inference::ModelInferResponse* resp);

}  // namespace kjit::server
