// Puts back, at the end of a scope, the CUDA context that was current on the calling thread at its
// start. torch's current device is the current context's device: a launch on another GPU makes
// that GPU's primary context current, and must not leave it so (the caller's next allocation would
// land on the wrong GPU).
#pragma once

#include <cuda.h>

#include "runtime/driver/cuda_driver.h"

namespace kjit::client {

class ContextRestorer {
 public:
  explicit ContextRestorer(const driver::Api* api) : api_(api) {
    if (api_->cuCtxGetCurrent(&saved_) != CUDA_SUCCESS) api_ = nullptr;
  }
  ~ContextRestorer() {
    if (api_ == nullptr) return;
    CUcontext now = nullptr;
    if (api_->cuCtxGetCurrent(&now) == CUDA_SUCCESS && now != saved_) (void)api_->cuCtxSetCurrent(saved_);
  }
  ContextRestorer(const ContextRestorer&) = delete;
  ContextRestorer& operator=(const ContextRestorer&) = delete;

 private:
  const driver::Api* api_;
  CUcontext saved_ = nullptr;
};

}  // namespace kjit::client
