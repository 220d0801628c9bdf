// DeviceStaging on a real device: buffers past kKeepBytes are given back after a launch, the
// page-locked host staging only once its stream has drained (freeing it waits for the GPU, and the
// stream may be waiting for a client's event), and small buffers are kept for the next launch.
#include <cstdint>
#include <optional>

#include "gtest/gtest.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/launch/staging.h"

namespace kjit::launch {
namespace {

class Staging : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = driver::Context::RetainPrimary(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_.emplace(std::move(*ctx));
    ASSERT_TRUE(ctx_->MakeCurrent().ok());
    auto api = driver::Get();
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *api;
    auto stream = driver::Stream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_.emplace(std::move(*stream));
  }
  std::optional<driver::Context> ctx_;
  const driver::Api* api_ = nullptr;
  std::optional<driver::Stream> stream_;
};

TEST_F(Staging, SmallBuffersAreKept) {
  DeviceStaging staging(0, stream_->get());
  ASSERT_TRUE(staging.Pinned(4096).ok());
  ASSERT_TRUE(staging.Workspace(1 << 20).ok());
  ASSERT_TRUE(staging.Staging(3 << 20).ok());
  const size_t held = staging.held_bytes();
  EXPECT_GE(held, size_t{4096} + (1 << 20) + (3 << 20));
  ASSERT_TRUE(stream_->Synchronize().ok());
  staging.Trim();
  EXPECT_EQ(staging.held_bytes(), held);
}

// The stream waits on a word in mapped host memory until the test sets it, as a launch waits for a
// client's event: the oversized page-locked staging stays meanwhile, and goes once the stream has run.
TEST_F(Staging, OversizedPinnedStagingGoesOnceTheStreamHasDrained) {
  DeviceStaging staging(0, stream_->get());
  constexpr size_t kBig = DeviceStaging::kKeepBytes + (1 << 20);
  auto pinned = staging.Pinned(kBig);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  (*pinned)[kBig - 1] = 1;  // every byte is the caller's
  ASSERT_TRUE(staging.Workspace(4096).ok());
  ASSERT_GE(staging.held_bytes(), kBig);

  auto gate = driver::PinnedHostBuffer::Alloc(4096, CU_MEMHOSTREGISTER_DEVICEMAP);
  ASSERT_TRUE(gate.ok()) << gate.status();
  volatile uint32_t* word = reinterpret_cast<volatile uint32_t*>(gate->data());
  *word = 0;
  auto gate_dev = gate->DevicePointer();
  ASSERT_TRUE(gate_dev.ok()) << gate_dev.status();
  ASSERT_EQ(api_->cuStreamWaitValue32(stream_->get(), *gate_dev, 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamQuery(stream_->get()), CUDA_ERROR_NOT_READY);

  staging.Trim();
  EXPECT_GE(staging.held_bytes(), kBig) << "freed while the stream may still copy from it";
  *word = 1;
  ASSERT_TRUE(stream_->Synchronize().ok());
  staging.Trim();
  EXPECT_LT(staging.held_bytes(), DeviceStaging::kKeepBytes);
  EXPECT_GE(staging.held_bytes(), size_t{4096}) << "the small workspace is kept";
  // Grown again on demand.
  auto again = staging.Pinned(kBig);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GE(staging.held_bytes(), kBig);
}

// Device buffers past kKeepBytes go in stream order, even while the stream waits (from a device
// with memory pools; without, they wait for the stream to drain, like the page-locked staging).
TEST_F(Staging, OversizedDeviceBuffersGo) {
  DeviceStaging staging(0, stream_->get());
  ASSERT_TRUE(staging.Workspace(DeviceStaging::kKeepBytes + 1).ok());
  ASSERT_TRUE(staging.Staging(DeviceStaging::kKeepBytes + 1).ok());
  ASSERT_GT(staging.held_bytes(), 2 * DeviceStaging::kKeepBytes);
  staging.Trim();
  ASSERT_TRUE(stream_->Synchronize().ok());
  staging.Trim();
  EXPECT_EQ(staging.held_bytes(), 0u);
}

}  // namespace
}  // namespace kjit::launch
