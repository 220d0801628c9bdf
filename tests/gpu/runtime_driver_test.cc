// The driver and kernel loading on a real device (the H200 test machine): device description,
// RAII buffers, events, graph capture and replay, module loading, a launch checked against the
// host, and a cubin of the wrong arch refused when its kernels are resolved.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/registry.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::driver {
namespace {

namespace fs = std::filesystem;

class WithDriver : public ::testing::Test {
 protected:
  void SetUp() override {
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

// Page-locked host memory mapped into the device: the device's writes through DevicePointer()
// land in data(); sizes round up to whole pages; a move leaves the source empty.
TEST_F(WithDriver, PinnedHostBufferIsMappedIntoTheDevice) {
  auto buf = PinnedHostBuffer::Alloc(4099, CU_MEMHOSTREGISTER_DEVICEMAP);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_EQ(buf->size(), 8192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 4096, 0u);
  std::fill(buf->data(), buf->data() + buf->size(), uint8_t{0});
  auto dev = buf->DevicePointer();
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto api = Get();
  ASSERT_TRUE(api.ok());
  ASSERT_EQ((*api)->cuMemsetD8(*dev + 5, 0x5C, 4000), CUDA_SUCCESS);
  ASSERT_EQ((*api)->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(buf->data()[4], 0);
  EXPECT_EQ(buf->data()[5], 0x5C);
  EXPECT_EQ(buf->data()[4004], 0x5C);
  EXPECT_EQ(buf->data()[4005], 0);
  PinnedHostBuffer moved = std::move(*buf);
  EXPECT_EQ(buf->data(), nullptr);
  EXPECT_EQ(moved.size(), 8192u);
  EXPECT_EQ(moved.data()[5], 0x5C);
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

constexpr char kEntry[] = R"(namespace t {
template <int N>
__global__ void affine(float* out, const float* in, int n) {
  __shared__ float tile[N];
  int i = blockIdx.x * N + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  if (i < n) out[i] = 2.f * tile[threadIdx.x] * kScale + 1.f;
}
}  // namespace t
)";

// A one-file kernel tree given through KJIT_KERNEL_DIR, with the device's context current.
class KernelTree : public WithDriver {
 protected:
  void SetUp() override {
    WithDriver::SetUp();
    root_ = fs::path(testing::TempDir()) / ("kjit_gpu_kt_" + std::to_string(getpid()));
    fs::create_directories(root_ / "t");
    std::ofstream(root_ / "t" / "affine.cu") << kEntry;
    setenv("KJIT_KERNEL_DIR", root_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("KJIT_KERNEL_DIR");
    fs::remove_all(root_);
  }
  static kernels::Specialization AffineSpec(int n, float scale) {
    kernels::Specialization s;
    s.family = "test";
    s.name = "n" + std::to_string(n);
    s.entry_source = "t/affine.cu";
    s.extra_options = {"-DkScale=" + std::to_string(scale) + "f"};
    s.name_expressions = {"t::affine<" + std::to_string(n) + ">"};
    return s;
  }
  fs::path root_;
};

TEST_F(KernelTree, CompilesLoadsAndLaunches) {
  auto devices = Devices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  const DeviceInfo& dev = devices->front();  // ordinal 0, current since SetUp
  kernels::KernelCompiler compiler(nullptr, 2);
  auto k = compiler.Get(AffineSpec(128, 3.f), dev.arch);
  ASSERT_TRUE(k.ok()) << k.status();
  auto loaded = kernels::LoadedKernels::Load({*k}, dev);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto fn = (*loaded)->Function("test", "n128", "t::affine<128>");
  ASSERT_TRUE(fn.ok()) << fn.status();
  EXPECT_EQ((*loaded)->Function("test", "n128", "t::affine<64>").status().code(), absl::StatusCode::kNotFound);

  const int n = 1000;  // not a multiple of the block
  std::vector<float> in(n), out(n, NAN);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  for (float& x : in) x = normal(rng);
  auto din = DeviceBuffer::Alloc(n * 4);
  auto dout = DeviceBuffer::Alloc(n * 4);
  ASSERT_TRUE(din.ok() && dout.ok());
  ASSERT_TRUE(din->CopyFromHost(in.data(), n * 4).ok());
  ASSERT_TRUE(dout->Fill(0xFF).ok());  // NaN poison
  CUdeviceptr o = dout->get(), i = din->get();
  int count = n;
  void* args[] = {&o, &i, &count};
  const Api* api = *Get();
  ASSERT_TRUE(
      Check(api->cuLaunchKernel(*fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr), "launch")
          .ok());
  ASSERT_TRUE(Check(api->cuCtxSynchronize(), "sync").ok());
  ASSERT_TRUE(dout->CopyToHost(out.data(), n * 4).ok());
  for (int j = 0; j < n; ++j) {
    const double expected = 2.0 * in[j] * 3.0 + 1.0;  // the device may fuse the multiply-add
    ASSERT_NEAR(out[j], expected, 1e-6 * (1.0 + std::fabs(expected))) << j;
  }

  // A cubin for another arch is refused at load, not at first launch.
  const std::string other = dev.arch == "sm_90" ? "sm_120" : "sm_90";
  auto wrong = compiler.Get(AffineSpec(128, 3.f), other);
  ASSERT_TRUE(wrong.ok());
  wrong->arch = dev.arch;  // lie about it: the driver must still refuse when resolving kernels
  wrong->cubin_arch = dev.arch;
  auto bad = kernels::LoadedKernels::Load({*wrong}, dev);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("CUDA_ERROR"), std::string::npos) << bad.status();
}

TEST_F(WithDriver, WholeCatalogLoadsOnTheDevice) {
  auto devices = Devices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  const DeviceInfo& dev = devices->front();
  const auto& catalog = kernels::Catalog();
  ASSERT_FALSE(catalog.empty());
  kernels::KernelCompiler compiler(nullptr);
  auto results = compiler.GetAll(catalog, {dev.arch});
  std::vector<kernels::CompiledKernel> compiled;
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    compiled.push_back(std::move(*r));
  }
  auto loaded = kernels::LoadedKernels::Load(compiled, dev);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (const kernels::Specialization& s : catalog) {
    for (const std::string& expr : s.name_expressions) {
      auto fn = (*loaded)->Function(s.family, s.name, expr);
      ASSERT_TRUE(fn.ok()) << fn.status();
      int regs = 0;
      const Api* api = *Get();
      ASSERT_TRUE(Check(api->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, *fn), "regs").ok());
      EXPECT_GT(regs, 0) << s.name << " " << expr;
    }
  }
}

}  // namespace
}  // namespace kjit::driver
