// The driver layer without a GPU: error mapping, range checks, and (where libcuda is absent, as in
// CI) every entry point reporting compile-only with FailedPrecondition. The device paths are
// tests/gpu/runtime_driver_test.cc.
#include <dlfcn.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/driver/cuda_driver.h"

namespace kjit::driver {
namespace {

bool DriverPresent() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

TEST(DriverTest, CheckMapsCodesAndNames) {
  EXPECT_TRUE(Check(CUDA_SUCCESS, "noop").ok());
  Status oom = Check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(8 bytes)");
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(oom.message().find("cuMemAlloc(8 bytes): CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos)
      << oom;
  EXPECT_EQ(Check(CUDA_ERROR_INVALID_VALUE, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Check(CUDA_ERROR_NO_BINARY_FOR_GPU, "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Check(CUDA_ERROR_NOT_READY, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Check(CUDA_ERROR_ILLEGAL_ADDRESS, "launch").code(), absl::StatusCode::kInternal);
  EXPECT_NE(Check(CUDA_ERROR_ILLEGAL_ADDRESS, "launch").message().find("CUDA_ERROR_ILLEGAL_ADDRESS"),
            std::string::npos);
}

TEST(DriverTest, RangeInsideIsOverflowSafe) {
  EXPECT_TRUE(RangeInside(0, 16, 16));
  EXPECT_TRUE(RangeInside(16, 0, 16));
  EXPECT_FALSE(RangeInside(17, 0, 16));
  EXPECT_FALSE(RangeInside(8, 9, 16));
  EXPECT_FALSE(RangeInside(8, SIZE_MAX, 16));
  EXPECT_FALSE(RangeInside(SIZE_MAX, 2, 16));
}

TEST(DriverTest, ArgumentErrorsComeBeforeTheDriver) {
  EXPECT_EQ(DeviceBuffer::Alloc(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Module::Load({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DriverTest, AvailabilityIsReportedCleanly) {
  auto api = Get();
  if (DriverPresent()) {  // the GPU machine: tests/gpu/runtime_driver_test.cc covers the rest
    ASSERT_TRUE(api.ok()) << api.status();
    EXPECT_NE((*api)->cuLaunchKernel, nullptr);
    EXPECT_EQ(*Get(), *api);
    return;
  }
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(api.status().message().find("compile-only: no CUDA driver ("), std::string::npos)
      << api.status();
  // Loading is attempted once; the answer is stable.
  EXPECT_EQ(Get().status(), api.status());
  auto devices = Devices();
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(devices.status().message().find("compile-only"), std::string::npos);
  EXPECT_EQ(Context::RetainPrimary(0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Stream::Create().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Event::Create().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DeviceBuffer::Alloc(64).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(PinnedHostBuffer::Alloc(64).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Module::Load(std::vector<char>(16, 0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kjit::driver
