// NVRTC to cubin without a GPU: archs, options, name expressions, logs, the resource report,
// determinism and concurrency.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::nvrtc {
namespace {

// A header given in memory, bf16 from the toolkit, a template kernel with a static smem tile.
constexpr char kHeader[] = R"(#pragma once
#include <cuda_bf16.h>
namespace t { __device__ inline float load(const __nv_bfloat16* p, int i) { return __bfloat162float(p[i]); } }
)";
constexpr char kSource[] = R"(#include "test/load.cuh"
namespace t {
template <int N, bool kNeg>
__global__ void scale(float* out, const __nv_bfloat16* in, float s) {
  __shared__ float tile[N];
  tile[threadIdx.x] = load(in, blockIdx.x * N + threadIdx.x) * s;
  __syncthreads();
  out[blockIdx.x * N + threadIdx.x] = kNeg ? -tile[N - 1 - threadIdx.x] : tile[N - 1 - threadIdx.x];
}
}  // namespace t
)";

CompileRequest TestRequest(std::string arch) {
  CompileRequest req;
  req.arch = std::move(arch);
  req.program_name = "test/scale.cu";
  req.source = kSource;
  req.headers = {{"test/load.cuh", kHeader}};
  req.name_expressions = {"t::scale<128, false>", "t::scale<256, true>"};
  return req;
}

template <typename S>  // std::string or absl::string_view (not std::string_view in this abseil)
bool Contains(const S& s, std::string_view part) {
  return std::string_view(s.data(), s.size()).find(part) != std::string_view::npos;
}

TEST(NvrtcTest, SupportedArchsIncludeTheTargets) {
  const auto& archs = SupportedArchs();
  for (const char* a : {"sm_90", "sm_90a", "sm_120", "sm_120a", "sm_100f"}) {
    EXPECT_NE(std::find(archs.begin(), archs.end(), a), archs.end()) << a;
    EXPECT_TRUE(ValidateArch(a).ok()) << a;
  }
  EXPECT_EQ(std::find(archs.begin(), archs.end(), "sm_89a"), archs.end());
  Status bad = ValidateArch("sm_95");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.message(), "sm_95")) << bad;
  EXPECT_TRUE(Contains(bad.message(), "sm_90 ")) << bad;
  EXPECT_TRUE(Contains(bad.message(), "sm_120a")) << bad;
  EXPECT_EQ(ValidateArch("compute_90").code(), absl::StatusCode::kInvalidArgument);
}

TEST(NvrtcTest, VersionIdentifiesTheBuild) {
  std::string v = Version();
  EXPECT_TRUE(Contains(v, "13.")) << v;
  EXPECT_TRUE(Contains(v, "(")) << v;
  EXPECT_FALSE(Contains(v, "unknown")) << v;
}

TEST(NvrtcTest, NormalizedOptionsSpellOutDefaults) {
  CompileRequest req = TestRequest("sm_120");
  req.options = {"-DKJIT_X=1", "--ftz=true", "-DKJIT_X=1"};
  std::vector<std::string> o = NormalizedOptions(req);
  ASSERT_FALSE(o.empty());
  EXPECT_EQ(o[0], "--gpu-architecture=sm_120");
  auto count = [&](const std::string& s) { return std::count(o.begin(), o.end(), s); };
  EXPECT_EQ(count("-std=c++17"), 1);
  EXPECT_EQ(count("--ptxas-options=--verbose"), 1);
  // Without these, cubins differ run to run (random internal symbol suffixes) and, with a driver,
  // NVRTC's own cache returns cubins without a resource report.
  EXPECT_EQ(count("-frandom-seed=0"), 1);
  EXPECT_EQ(count("--no-cache"), 1);
  EXPECT_EQ(count("--ftz=false"), 0);  // replaced by the request's --ftz=true
  EXPECT_EQ(count("--ftz=true"), 1);
  EXPECT_EQ(count("-DKJIT_X=1"), 1);
  EXPECT_EQ(NormalizedOptions(req), o);  // deterministic
  for (const std::string& opt : o) EXPECT_FALSE(Contains(opt, "include-path")) << opt;
}

TEST(NvrtcTest, CompilesToCubinWithLoweredNamesAndResources) {
  for (const char* arch : {"sm_90", "sm_120"}) {
    auto r = Compile(TestRequest(arch));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_GT(r->cubin.size(), 64u);
    EXPECT_EQ(std::string(r->cubin.data(), 4), "\x7f" "ELF");  // cubin, not PTX
    ASSERT_EQ(r->lowered_names.size(), 2u);
    EXPECT_EQ(r->lowered_names[0].first, "t::scale<128, false>");
    EXPECT_EQ(r->lowered_names[0].second, "_ZN1t5scaleILi128ELb0EEEvPfPK13__nv_bfloat16f");
    EXPECT_EQ(r->lowered_names[1].second, "_ZN1t5scaleILi256ELb1EEEvPfPK13__nv_bfloat16f");
    ASSERT_EQ(r->resources.size(), 2u) << r->log;
    for (const KernelResources& k : r->resources) {
      EXPECT_GT(k.registers, 0) << k.lowered_name;
      EXPECT_EQ(k.spill_store_bytes, 0);
      EXPECT_EQ(k.spill_load_bytes, 0);
      const int n = Contains(k.lowered_name, "ILi128") ? 128 : 256;
      EXPECT_EQ(k.shared_bytes, n * 4) << k.lowered_name;
    }
    EXPECT_TRUE(Contains(r->log, std::string("for '") + arch + "'")) << r->log;
    EXPECT_GT(r->compile_ms, 0);
  }
}

TEST(NvrtcTest, RepeatedCompilesAreByteIdentical) {
  auto a = Compile(TestRequest("sm_90"));
  auto b = Compile(TestRequest("sm_90"));
  auto c = Compile(TestRequest("sm_90a"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->cubin, b->cubin);
  EXPECT_NE(a->cubin, c->cubin);  // the exact arch string matters
}

TEST(NvrtcTest, ConcurrentCompilesAgree) {
  auto reference = Compile(TestRequest("sm_120"));
  ASSERT_TRUE(reference.ok());
  std::vector<StatusOr<CompileResult>> results(4, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { results[i] = Compile(TestRequest("sm_120")); });
  for (auto& t : threads) t.join();
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->cubin, reference->cubin);
  }
}

TEST(NvrtcTest, FailureCarriesLogWithFileAndLine) {
  CompileRequest req = TestRequest("sm_90");
  req.source = "#include \"test/load.cuh\"\n__global__ void k(float* o) {\n  o[0] = undefined_name;\n}\n";
  req.name_expressions = {"k"};
  auto r = Compile(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status().message(), "test/scale.cu:3: ")) << r.status();
  EXPECT_TRUE(Contains(r.status().message(), "undefined_name")) << r.status();

  CompileRequest missing = TestRequest("sm_90");
  missing.headers.clear();
  auto m = Compile(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(Contains(m.status().message(), "test/load.cuh")) << m.status();
}

TEST(NvrtcTest, RejectsBadArchAndForbiddenOptions) {
  EXPECT_EQ(Compile(TestRequest("sm_12")).status().code(), absl::StatusCode::kInvalidArgument);
  CompileRequest req = TestRequest("sm_90");
  req.options = {"-arch=sm_80"};
  EXPECT_EQ(Compile(req).status().code(), absl::StatusCode::kInvalidArgument);
  req.options = {"--include-path=/tmp"};
  EXPECT_EQ(Compile(req).status().code(), absl::StatusCode::kInvalidArgument);
  req.options = {"--no-such-option"};
  auto r = Compile(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  req = TestRequest("sm_90");
  req.name_expressions = {"t::scale<128, false>", "t::nonexistent<1>"};
  EXPECT_FALSE(Compile(req).ok());
}

TEST(NvrtcTest, ParsesSpillsStackAndEntriesOnly) {
  constexpr char kLog[] =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Function properties for helper\n"
      "ptxas         .     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function '_Z1av' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z1av\n"
      "ptxas         .     40 bytes stack frame, 24 bytes spill stores, 16 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 40 bytes cumulative stack size, "
      "99328 bytes smem, 400 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function '_Z1bv' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z1bv\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 32 registers\n";
  auto k = ParseResourceReport(kLog);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].lowered_name, "_Z1av");
  EXPECT_EQ(k[0].registers, 255);
  EXPECT_EQ(k[0].stack_bytes, 40);
  EXPECT_EQ(k[0].spill_store_bytes, 24);
  EXPECT_EQ(k[0].spill_load_bytes, 16);
  EXPECT_EQ(k[0].shared_bytes, 99328);
  EXPECT_EQ(k[0].const_bytes, 400);
  EXPECT_EQ(k[1].lowered_name, "_Z1bv");
  EXPECT_EQ(k[1].registers, 32);
  EXPECT_EQ(k[1].shared_bytes, 0);
  EXPECT_TRUE(ParseResourceReport("").empty());
}

TEST(NvrtcTest, IncludeDirOverride) {
  EXPECT_FALSE(CudaIncludeDir().empty());
  setenv("KJIT_CUDA_INCLUDE", "/nonexistent-toolkit/include", 1);
  EXPECT_EQ(CudaIncludeDir(), "/nonexistent-toolkit/include");
  auto r = Compile(TestRequest("sm_90"));
  unsetenv("KJIT_CUDA_INCLUDE");
  ASSERT_FALSE(r.ok());  // cuda_bf16.h is not built into NVRTC 13
  EXPECT_TRUE(Contains(r.status().message(), "cuda_bf16.h")) << r.status();
}

}  // namespace
}  // namespace kjit::nvrtc
