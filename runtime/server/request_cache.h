// The parse of the last ModelInferRequest one thread received: equal bytes parse to the same
// message, so a client that repeats its request (fixed buffers, new contents each step) skips the
// parse, which took 8-18 us on the H200 host (mostly the parameter maps). The messages and buffers
// are kept across requests so that their allocations are reused, except after a large request or
// response (tensors inline), whose memory would otherwise stay. One per transport thread (a launch
// ring's poller, each gRPC completion-queue thread); not thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "inference/grpc_service.pb.h"
#include "runtime/common/status.h"
#include "runtime/server/infer_wire.h"

namespace kjit::server {

class RequestCache {
 public:
  // Bytes above this, in a request or a response, are not kept.
  static constexpr size_t kKeepBytes = size_t{1} << 20;

  // Where the caller puts the next request's bytes (the previous contents are garbage).
  std::string* incoming() { return &incoming_; }
  // The parse of incoming(): the kept message when the bytes equal the previous request's, else a
  // new parse once CheckInferRequestWire has passed them under `limits` (if they are more than
  // InferWireLimits::kWalkAbove). An error (that check's, or
  // INVALID_ARGUMENT) when they are not a serialized inference.ModelInferRequest it accepts.
  StatusOr<const inference::ModelInferRequest*> Parse(const InferWireLimits& limits);
  // A cleared response message to fill.
  inference::ModelInferResponse* response() {
    response_.Clear();
    return &response_;
  }
  // Where a transport that serializes into a string (a launch ring) puts the response's bytes.
  std::string* outgoing() { return &outgoing_; }
  // After the answer, whose response serialized to `response_bytes`: drops the buffers if the
  // request or the response was large (also a response too large to send, already cleared from
  // outgoing()).
  void Done(size_t response_bytes);

 private:
  std::string bytes_, incoming_, outgoing_;  // bytes_: the bytes request_ was parsed from
  inference::ModelInferRequest request_;
  bool parsed_ = false;
  inference::ModelInferResponse response_;
};

}  // namespace kjit::server
