#include "runtime/launch/device_runtime.h"

#include "absl/strings/str_cat.h"
#include "runtime/common/log.h"

namespace kjit::launch {

StatusOr<std::unique_ptr<DeviceRuntime>> DeviceRuntime::Create(const driver::DeviceInfo& info) {
  KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(info.ordinal));
  KJIT_RETURN_IF_ERROR(ctx.MakeCurrent());
  KJIT_ASSIGN_OR_RETURN(driver::Stream stream, driver::Stream::Create());
  KJIT_ASSIGN_OR_RETURN(driver::Stream readback, driver::Stream::Create());
  return std::unique_ptr<DeviceRuntime>(
      new DeviceRuntime(info, std::move(ctx), std::move(stream), std::move(readback)));
}

size_t DeviceRuntime::ReapFinished() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return 1;  // a launch is running: it reaps, and the caller asks again
  if (in_flight_.size() == 0 && !blocked()) return 0;
  if (!ctx_.MakeCurrent().ok()) return in_flight_.size();
  in_flight_.Reap();
  if (blocked()) (void)CheckUnblocked();  // a blocked GPU is seen taking launches again once drained
  return in_flight_.size();
}

Status DeviceRuntime::CheckUnblocked() {
  if (blocked_.empty()) return absl::OkStatus();
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  const CUresult r = api->cuStreamQuery(stream_.get());
  if (r == CUDA_SUCCESS) {
    Log(LogLevel::kInfo, absl::StrCat("GPU ", info_.ordinal, ": its stream has drained; launches are taken again"));
    blocked_.clear();
    blocked_flag_.store(false, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (r != CUDA_ERROR_NOT_READY) return driver::Check(r, "cuStreamQuery(launch stream)");
  return absl::UnavailableError(absl::StrCat("GPU ", info_.ordinal, " takes no launches until its stream has run the work ",
                                             "queued on it: ", blocked_, "; retry later"));
}

}  // namespace kjit::launch
