#include "runtime/launch/device_runtime.h"

namespace kjit::launch {

StatusOr<std::unique_ptr<DeviceRuntime>> DeviceRuntime::Create(const driver::DeviceInfo& info) {
  KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(info.ordinal));
  KJIT_RETURN_IF_ERROR(ctx.MakeCurrent());
  KJIT_ASSIGN_OR_RETURN(driver::Stream stream, driver::Stream::Create());
  KJIT_ASSIGN_OR_RETURN(driver::Stream readback, driver::Stream::Create());
  return std::unique_ptr<DeviceRuntime>(
      new DeviceRuntime(info, std::move(ctx), std::move(stream), std::move(readback)));
}

}  // namespace kjit::launch
