#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/driver/driver_internal.h"

namespace kjit::driver {

StatusOr<Context> Context::RetainPrimary(int ordinal) {
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  int count = 0;
  KJIT_CU_RETURN_IF_ERROR(api->cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ordinal ", ordinal, " out of range (", count, " devices)"));
  }
  CUdevice dev = 0;
  KJIT_CU_RETURN_IF_ERROR(api->cuDeviceGet(&dev, ordinal), absl::StrCat("cuDeviceGet(", ordinal, ")"));
  CUcontext ctx = nullptr;
  KJIT_CU_RETURN_IF_ERROR(api->cuDevicePrimaryCtxRetain(&ctx, dev),
                          absl::StrCat("cuDevicePrimaryCtxRetain(device ", ordinal, ")"));
  return Context(ctx, dev, ordinal);
}

Context::Context(Context&& other) noexcept
    : ctx_(std::exchange(other.ctx_, nullptr)), dev_(other.dev_), ordinal_(other.ordinal_) {}

Context& Context::operator=(Context&& other) noexcept {
  if (this != &other) {
    Reset();
    ctx_ = std::exchange(other.ctx_, nullptr);
    dev_ = other.dev_;
    ordinal_ = other.ordinal_;
  }
  return *this;
}

Context::~Context() { Reset(); }

void Context::Reset() {
  if (ctx_ == nullptr) return;
  if (const Api* api = LoadedApi()) api->cuDevicePrimaryCtxRelease(dev_);  // nothing to do on error
  ctx_ = nullptr;
}

Status Context::MakeCurrent() const {
  if (ctx_ == nullptr) return absl::FailedPreconditionError("MakeCurrent on a moved-from Context");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  return Check(api->cuCtxSetCurrent(ctx_), absl::StrCat("cuCtxSetCurrent(device ", ordinal_, ")"));
}

}  // namespace kjit::driver
