// Specialization + arch -> cubin through the cache (compiled, disk hit, memory hit: identical
// bytes), the bounded pool, arch compatibility, and the arch check at load. A small test kernel
// tree is given through KJIT_KERNEL_DIR. Loading and launching on a device: tests/gpu/runtime_driver_test.cc.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <unistd.h>

#include "gtest/gtest.h"
#include "jit_cache/cubin_cache.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::kernels {
namespace {

namespace fs = std::filesystem;

constexpr char kHeader[] = R"(#pragma once
namespace t { __device__ inline float twice(float x) { return 2.f * x; } }
)";
// kScale comes from the specialization's options (-D); the entry source includes a header by its tree-relative name.
constexpr char kEntry[] = R"(#include "t/twice.cuh"
namespace t {
template <int N>
__global__ void affine(float* out, const float* in, int n) {
  __shared__ float tile[N];
  int i = blockIdx.x * N + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  if (i < n) out[i] = twice(tile[threadIdx.x]) * kScale + 1.f;
}
}  // namespace t
)";

class KernelCompilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(testing::TempDir()) / ("kjit_kc_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "tree" / "t");
    WriteTree(kHeader);
    setenv("KJIT_KERNEL_DIR", (root_ / "tree").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("KJIT_KERNEL_DIR");
    fs::remove_all(root_);
  }
  void WriteTree(const std::string& header) {
    std::ofstream(root_ / "tree" / "t" / "twice.cuh") << header;
    std::ofstream(root_ / "tree" / "t" / "affine.cu") << kEntry;
  }
  static Specialization Spec(int n, float scale) {
    Specialization s;
    s.family = "test";
    s.name = "n" + std::to_string(n);
    s.entry_source = "t/affine.cu";
    s.extra_options = {"-DkScale=" + std::to_string(scale) + "f"};
    s.name_expressions = {"t::affine<" + std::to_string(n) + ">"};
    return s;
  }
  fs::path root_;
};

TEST_F(KernelCompilerTest, CompilesWithoutCache) {
  KernelCompiler compiler(nullptr, 1);
  auto k = compiler.Get(Spec(128, 3.f), "sm_120");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->origin, CompiledKernel::Origin::kCompiled);
  EXPECT_EQ(k->arch, "sm_120");
  EXPECT_TRUE(k->cache_key.empty());
  ASSERT_EQ(k->lowered_names.size(), 1u);
  EXPECT_EQ(k->lowered_names[0].second, "_ZN1t6affineILi128EEEvPfPKfi");
  ASSERT_EQ(k->resources.size(), 1u);
  EXPECT_GT(k->resources[0].registers, 0);
  EXPECT_EQ(k->resources[0].shared_bytes, 128 * 4);
  EXPECT_EQ(std::string(k->cubin.data(), 4), "\x7f" "ELF");
}

TEST_F(KernelCompilerTest, ErrorsNameTheSpecAndTheEntryLine) {
  std::ofstream(root_ / "tree" / "t" / "affine.cu") << "#include \"t/twice.cuh\"\n\nint x = missing;\n";
  KernelCompiler compiler(nullptr, 1);
  auto k = compiler.Get(Spec(32, 1.f), "sm_90");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(k.status().message());
  EXPECT_NE(msg.find("test/n32 for sm_90"), std::string::npos) << msg;
  EXPECT_NE(msg.find("t/affine.cu:3: "), std::string::npos) << msg;
  EXPECT_EQ(compiler.Get(Spec(32, 1.f), "sm_91").status().code(), absl::StatusCode::kInvalidArgument);
  Specialization missing = Spec(32, 1.f);
  missing.entry_source = "t/none.cu";
  EXPECT_EQ(compiler.Get(missing, "sm_90").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KernelCompilerTest, TargetArchIsCompiledCachedAndLoadableOnTheAskedArch) {
  cache::Options opts;
  opts.dir = (root_ / "cache").string();
  auto cache = cache::CubinCache::Open(opts);
  KernelCompiler compiler(cache.get(), 1);
  Specialization s = Spec(64, 0.5f);
  s.target_arch = [](std::string_view arch) { return arch == "sm_90" ? std::string("sm_90a") : std::string(arch); };
  auto a = compiler.Get(s, "sm_90");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->arch, "sm_90");
  EXPECT_EQ(a->cubin_arch, "sm_90a");
  auto plain = compiler.Get(Spec(64, 0.5f), "sm_90");  // same program without the mapping
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->cubin_arch, "sm_90");
  EXPECT_NE(plain->cache_key, a->cache_key);
  auto again = compiler.Get(s, "sm_90");  // from the cache, still recorded as sm_90a
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->origin, CompiledKernel::Origin::kCompiled);
  EXPECT_EQ(again->cubin_arch, "sm_90a");
  EXPECT_EQ(again->cubin, a->cubin);
  EXPECT_TRUE(ArchRunsOn(a->cubin_arch, "sm_90"));
  EXPECT_FALSE(ArchRunsOn(a->cubin_arch, "sm_100"));
  s.target_arch = [](std::string_view) { return std::string("sm_9x"); };
  EXPECT_EQ(compiler.Get(s, "sm_90").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KernelCompilerTest, CacheTiersGiveIdenticalCubinsAndKeysFollowContent) {
  cache::Options opts;
  opts.dir = (root_ / "cache").string();
  std::string key;
  std::vector<char> cubin;
  {
    auto cache = cache::CubinCache::Open(opts);
    ASSERT_TRUE(cache->warning().empty()) << cache->warning();
    KernelCompiler compiler(cache.get(), 1);
    auto a = compiler.Get(Spec(64, 0.5f), "sm_90");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->origin, CompiledKernel::Origin::kCompiled);
    EXPECT_EQ(a->cache_key.size(), 64u);
    auto b = compiler.Get(Spec(64, 0.5f), "sm_90");
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->origin, CompiledKernel::Origin::kMemoryHit);
    EXPECT_EQ(a->cubin, b->cubin);
    EXPECT_EQ(a->cache_key, b->cache_key);
    EXPECT_EQ(b->lowered_names, a->lowered_names);
    ASSERT_EQ(b->resources.size(), 1u);
    EXPECT_EQ(b->resources[0].registers, a->resources[0].registers);
    key = a->cache_key;
    cubin = a->cubin;
  }
  {
    auto cache = cache::CubinCache::Open(opts);
    KernelCompiler compiler(cache.get(), 1);
    auto c = compiler.Get(Spec(64, 0.5f), "sm_90");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->origin, CompiledKernel::Origin::kDiskHit);
    EXPECT_EQ(c->cubin, cubin);
    EXPECT_EQ(c->cache_key, key);
    // A fresh compile without the cache gives the same bytes.
    auto fresh = KernelCompiler(nullptr, 1).Get(Spec(64, 0.5f), "sm_90");
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(fresh->cubin, cubin);
    // Other arch, other options, other header content: other keys, compiled again.
    auto arch = compiler.Get(Spec(64, 0.5f), "sm_90a");
    auto options = compiler.Get(Spec(64, 0.25f), "sm_90");
    WriteTree(std::string(kHeader) + "// edited\n");
    auto edited = compiler.Get(Spec(64, 0.5f), "sm_90");
    for (auto* k : {&arch, &options, &edited}) {
      ASSERT_TRUE(k->ok()) << k->status();
      EXPECT_NE((*k)->cache_key, key);
      EXPECT_EQ((*k)->origin, CompiledKernel::Origin::kCompiled);
    }
    EXPECT_EQ(edited->cubin, cubin);  // a comment changes the key, not the code
  }
}

TEST_F(KernelCompilerTest, GetAllWithoutKeepingReportsEachKernelAndHoldsNone) {
  // A daemon's Compile streams each kernel as it comes: the call then holds no cubin past its
  // progress call, and the results keep only the statuses.
  KernelCompiler compiler(nullptr, 2);
  std::vector<Specialization> specs = {Spec(32, 1.f), Spec(64, 1.f)};
  specs[1].name_expressions = {"t::affine<7"};  // broken on purpose: its two items fail
  int kernels_seen = 0;
  auto results = compiler.GetAll(specs, {"sm_90", "sm_120"}, [&](int, int, const CompiledKernel* k, const Status& s) {
    EXPECT_EQ(k != nullptr, s.ok());
    if (k != nullptr) {
      EXPECT_FALSE(k->cubin.empty());
      ++kernels_seen;
    }
  }, /*keep_results=*/false);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(kernels_seen, 2);
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_FALSE(results[i].ok());
    if (i < 2) {
      EXPECT_EQ(results[i].status().code(), absl::StatusCode::kCancelled) << results[i].status();
    } else {
      EXPECT_NE(results[i].status().code(), absl::StatusCode::kCancelled) << results[i].status();  // the failure itself
    }
  }
}

TEST_F(KernelCompilerTest, GetAllStartsNoItemOnceTheCallerStops) {
  // A daemon's Compile whose client has cancelled or left: the items not yet started are dropped
  // (CANCELLED, no progress call) instead of compiled for nobody.
  KernelCompiler compiler(nullptr, 1);  // one compile at a time, on the caller's thread
  const std::vector<Specialization> specs = {Spec(32, 1.f), Spec(64, 1.f), Spec(96, 1.f)};
  std::atomic<bool> stopped{false};
  int progress_calls = 0;
  auto results = compiler.GetAll(specs, {"sm_90", "sm_120"}, [&](int, int, const CompiledKernel* k, const Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_NE(k, nullptr);
    ++progress_calls;
    stopped = true;  // the client goes after the first kernel
  }, /*keep_results=*/true, [&] { return stopped.load(); });
  EXPECT_EQ(progress_calls, 1);
  ASSERT_EQ(results.size(), 6u);
  EXPECT_TRUE(results[0].ok()) << results[0].status();
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_FALSE(results[i].ok());
    EXPECT_EQ(results[i].status().code(), absl::StatusCode::kCancelled) << results[i].status();
  }
  EXPECT_EQ(compiler.peak_parallel(), 1);
}

TEST_F(KernelCompilerTest, GetGivesUpWaitingForACompileOnceTheCallerStops) {
  // The caller stops after Get's first look: the look once a compile is free (the one a waiting
  // caller makes every 50 ms too) catches it, nothing is compiled, and the answer says why.
  KernelCompiler compiler(nullptr, 1);
  int looks = 0;
  auto r = compiler.Get(Spec(32, 1.f), "sm_90", [&] { return ++looks > 1; });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_NE(r.status().message().find("stopped waiting"), std::string_view::npos) << r.status();
  EXPECT_GE(looks, 2);
  EXPECT_EQ(compiler.peak_parallel(), 0);  // no NVRTC compile ran
}

TEST_F(KernelCompilerTest, GetAllKeepsOrderAndReportsProgress) {
  KernelCompiler compiler(nullptr, 2);
  EXPECT_EQ(compiler.max_parallel(), 2);
  std::vector<Specialization> specs = {Spec(32, 1.f), Spec(64, 1.f), Spec(96, 1.f)};
  specs[1].name_expressions = {"t::affine<7"};  // broken on purpose: its two items fail
  std::vector<std::string> archs = {"sm_90", "sm_120"};
  std::vector<int> seen;
  auto results = compiler.GetAll(specs, archs, [&](int done, int total, const CompiledKernel* k,
                                                   const Status& s) {
    EXPECT_EQ(total, 6);
    EXPECT_EQ(k != nullptr, s.ok());
    seen.push_back(done);
  });
  ASSERT_EQ(results.size(), 6u);
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3, 4, 5, 6}));
  for (size_t i = 0; i < results.size(); ++i) {
    const Specialization& spec = specs[i / 2];
    if (spec.name == "n64") {
      EXPECT_FALSE(results[i].ok());
      continue;
    }
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(results[i]->spec.name, spec.name);
    EXPECT_EQ(results[i]->arch, archs[i % 2]);
  }
  EXPECT_GE(KernelCompiler::DefaultParallelism(), 1);
  EXPECT_LE(KernelCompiler::DefaultParallelism(), static_cast<int>(std::thread::hardware_concurrency()));
}

// max_parallel bounds the compiles of every caller together: six threads, each compiling its own
// two specializations through GetAll (whose own pool is also max_parallel wide), never run more
// than two NVRTC compiles at once, and every result is right.
TEST_F(KernelCompilerTest, ConcurrentCallersShareTheBound) {
  KernelCompiler compiler(nullptr, 2);
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([&, c] {
      const std::vector<Specialization> specs = {Spec(32 * (c + 1), 1.f), Spec(32 * (c + 1), 2.f)};
      for (const auto& r : compiler.GetAll(specs, {"sm_90"})) ok += r.ok() ? 1 : 0;
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok.load(), 12);
  EXPECT_EQ(compiler.peak_parallel(), 2);
}

TEST(ArchRunsOnTest, Compatibility) {
  EXPECT_TRUE(ArchRunsOn("sm_90", "sm_90"));
  EXPECT_TRUE(ArchRunsOn("sm_90a", "sm_90"));
  EXPECT_TRUE(ArchRunsOn("sm_80", "sm_86"));
  EXPECT_TRUE(ArchRunsOn("sm_120", "sm_121"));
  EXPECT_TRUE(ArchRunsOn("sm_100f", "sm_103"));
  EXPECT_FALSE(ArchRunsOn("sm_120", "sm_90"));
  EXPECT_FALSE(ArchRunsOn("sm_90", "sm_120"));
  EXPECT_FALSE(ArchRunsOn("sm_86", "sm_80"));
  EXPECT_FALSE(ArchRunsOn("sm_120a", "sm_121"));
  EXPECT_FALSE(ArchRunsOn("compute_90", "sm_90"));
  EXPECT_FALSE(ArchRunsOn("sm_9x", "sm_90"));
}

TEST_F(KernelCompilerTest, LoadRejectsAWrongArchBeforeTouchingTheDriver) {
  auto k = KernelCompiler(nullptr, 1).Get(Spec(32, 1.f), "sm_120");
  ASSERT_TRUE(k.ok()) << k.status();
  driver::DeviceInfo h200;
  h200.cc_major = 9;
  h200.arch = "sm_90";
  auto loaded = LoadedKernels::Load({*k}, h200);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(loaded.status().message()).find("sm_120 cannot run on sm_90"), std::string::npos)
      << loaded.status();
}

}  // namespace
}  // namespace kjit::kernels
