// The driver layer on any machine: without libcuda every entry point reports compile-only with
// FailedPrecondition; with a GPU the RAII types round-trip data and report range errors.
#include <dlfcn.h>

#include <cstdint>
#include <algorithm>
#include <numeric>
#include <optional>
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

TEST(DriverTest, WithoutDriverEverythingIsCompileOnly) {
  if (DriverPresent()) GTEST_SKIP() << "libcuda present: covered by WithDriver*";
  auto api = Get();
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(api.status().message().find("compile-only: no CUDA driver ("), std::string::npos)
      << api.status();
  // Loading is attempted once; the answer is stable.
  EXPECT_EQ(Get().status(), api.status());
  auto devices = Devices();
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Context::RetainPrimary(0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Stream::Create().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Event::Create().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DeviceBuffer::Alloc(64).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Module::Load(std::vector<char>(16, 0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

class WithDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DriverPresent()) GTEST_SKIP() << "no libcuda: covered by WithoutDriverEverythingIsCompileOnly";
    auto ctx = Context::RetainPrimary(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_.emplace(std::move(*ctx));
    ASSERT_TRUE(ctx_->MakeCurrent().ok());
  }
  std::optional<Context> ctx_;
};

TEST_F(WithDriver, DevicesDescribeTheGpus) {
  auto devices = Devices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_FALSE(devices->empty());
  for (const DeviceInfo& d : *devices) {
    EXPECT_EQ(d.arch, "sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor));
    EXPECT_GT(d.sm_count, 0);
    EXPECT_GT(d.total_mem, size_t{1} << 30);
    EXPECT_GE(d.max_smem_per_block_optin, 48 * 1024);
    EXPECT_EQ(d.uuid.size(), 40u) << d.uuid;
    EXPECT_FALSE(d.name.empty());
  }
  EXPECT_EQ(Context::RetainPrimary(static_cast<int>(devices->size())).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(WithDriver, BufferRoundTripAndRangeChecks) {
  auto buf = DeviceBuffer::Alloc(4099);
  ASSERT_TRUE(buf.ok()) << buf.status();
  std::vector<uint8_t> in(4099), out(4099, 0);
  std::iota(in.begin(), in.end(), uint8_t{7});
  ASSERT_TRUE(buf->Fill(0xAB).ok());
  ASSERT_TRUE(buf->CopyToHost(out.data(), out.size()).ok());
  EXPECT_EQ(out[0], 0xAB);
  EXPECT_EQ(out[4098], 0xAB);
  ASSERT_TRUE(buf->CopyFromHost(in.data() + 3, 4096, 3).ok());
  ASSERT_TRUE(buf->CopyToHost(out.data(), out.size()).ok());
  EXPECT_EQ(out[0], 0xAB);
  EXPECT_TRUE(std::equal(in.begin() + 3, in.end(), out.begin() + 3));
  EXPECT_EQ(buf->CopyFromHost(in.data(), 4097, 3).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(buf->CopyToHost(out.data(), 2, SIZE_MAX).code(), absl::StatusCode::kOutOfRange);
  DeviceBuffer moved = std::move(*buf);
  EXPECT_EQ(buf->get(), 0u);
  EXPECT_EQ(moved.size(), 4099u);
}

TEST_F(WithDriver, EventsTimeAStreamAndGraphsReplay) {
  auto stream = Stream::Create();
  auto start = Event::Create();
  auto end = Event::Create();
  auto buf = DeviceBuffer::Alloc(1 << 20);
  ASSERT_TRUE(stream.ok() && start.ok() && end.ok() && buf.ok());
  const Api* api = *Get();
  ASSERT_TRUE(start->Record(stream->get()).ok());
  ASSERT_TRUE(Check(api->cuMemsetD32Async(buf->get(), 0x01020304u, (1 << 18), stream->get()), "memset").ok());
  ASSERT_TRUE(end->Record(stream->get()).ok());
  ASSERT_TRUE(end->Synchronize().ok());
  auto ms = Event::ElapsedMs(*start, *end);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 0.f);
  // Capture a memset into a graph and replay it: exercises the versioned capture/instantiate entries.
  ASSERT_TRUE(Check(api->cuStreamBeginCapture(stream->get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin").ok());
  ASSERT_TRUE(Check(api->cuMemsetD8Async(buf->get(), 0x5A, 1 << 20, stream->get()), "memset8").ok());
  CUgraph graph = nullptr;
  ASSERT_TRUE(Check(api->cuStreamEndCapture(stream->get(), &graph), "end").ok());
  CUgraphExec exec = nullptr;
  ASSERT_TRUE(Check(api->cuGraphInstantiate(&exec, graph, 0), "instantiate").ok());
  ASSERT_TRUE(Check(api->cuGraphLaunch(exec, stream->get()), "launch").ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  std::vector<uint8_t> host(1 << 20);
  ASSERT_TRUE(buf->CopyToHost(host.data(), host.size()).ok());
  EXPECT_EQ(std::count(host.begin(), host.end(), 0x5A), 1 << 20);
  EXPECT_TRUE(Check(api->cuGraphExecDestroy(exec), "exec destroy").ok());
  EXPECT_TRUE(Check(api->cuGraphDestroy(graph), "graph destroy").ok());
}

TEST_F(WithDriver, GarbageCubinIsRejected) {
  auto m = Module::Load(std::vector<char>(256, 'x'));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("cuModuleLoadData"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace kjit::driver
