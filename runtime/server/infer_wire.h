// A ModelInferRequest's bytes, checked before protobuf parses them. A parse can take far more memory
// than its bytes: an empty input tensor is 2 bytes on the wire and about 200 parsed, an INT64 zero 1
// byte and 8, an unknown field 2 bytes and a heap entry. One 20 MB request of empty inputs took
// kjitd 2.1 GB; at --max-request-bytes (128 MiB) that is 14 GB, and a few in parallel end the
// process. This walk reads only the wire format (no allocation) and refuses, before any parse:
// more entries than a request can use (tensors, parameters, dims, unknown fields), start groups,
// and typed contents whose parsed arrays would exceed a budget. What it accepts parses to at most a
// few KB of messages plus that budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/common/status.h"

namespace kjit::server {

struct InferWireLimits {
  static constexpr int kMaxTensors = 128;      // inputs, outputs, raw_input_contents: each
  static constexpr int kMaxParameters = 64;    // entries of one parameters map (the request's, a tensor's)
  static constexpr int kMaxDims = 32;          // one input's shape
  static constexpr int kMaxUnknownFields = 64; // fields the protocol does not define, in all
  // Requests of at most this many bytes parse to at most about 7 MB whatever they hold: callers skip
  // the walk for them (it costs about a third of a parse, and launches are small requests).
  static constexpr size_t kWalkAbove = size_t{64} << 10;
  // Bytes the typed contents (InferTensorContents' arrays) take once parsed, all inputs together.
  uint64_t max_contents_bytes = uint64_t{128} << 20;
};

// OK, or INVALID_ARGUMENT (malformed bytes, too many entries, a group) or RESOURCE_EXHAUSTED (typed
// contents over the budget), with a message that says what to send instead.
Status CheckInferRequestWire(std::string_view bytes, const InferWireLimits& limits);

}  // namespace kjit::server
