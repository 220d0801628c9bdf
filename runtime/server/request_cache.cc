#include "runtime/server/request_cache.h"

#include <malloc.h>

namespace kjit::server {

StatusOr<const inference::ModelInferRequest*> RequestCache::Parse(const InferWireLimits& limits) {
  if (!parsed_ || incoming_ != bytes_) {
    bytes_.swap(incoming_);
    parsed_ = false;
    if (bytes_.size() > InferWireLimits::kWalkAbove) KJIT_RETURN_IF_ERROR(CheckInferRequestWire(bytes_, limits));
    parsed_ = request_.ParseFromString(bytes_);
    if (!parsed_) return absl::InvalidArgumentError("the request is not a serialized inference.ModelInferRequest");
  }
  return &request_;
}

void RequestCache::Done(size_t response_bytes) {
  if (bytes_.size() <= kKeepBytes && response_bytes <= kKeepBytes && outgoing_.capacity() <= kKeepBytes) return;
  std::string().swap(bytes_);
  std::string().swap(incoming_);
  std::string().swap(outgoing_);
  request_ = inference::ModelInferRequest();
  response_ = inference::ModelInferResponse();
  parsed_ = false;
  malloc_trim(0);  // hand the large request's pages back to the system rather than keep them
}

}  // namespace kjit::server
