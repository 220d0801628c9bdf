// Compile -> disk hit -> memory hit serve byte-identical entries, and the counters say which.
#include <gtest/gtest.h>

#include <filesystem>

#include "jit_cache/cubin_cache.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

TEST(CacheTiers, CompileThenDiskHitThenMemoryHit) {
  TempDir dir;
  const Request req = FakeRequest(1);
  std::atomic<int> calls{0};

  auto first = CubinCache::Open(DirOptions(dir.path()));
  ASSERT_FALSE(first->memory_only()) << first->warning();
  EXPECT_EQ(first->warning(), "");
  Origin o = Origin::kMemoryHit;
  StatusOr<Entry> compiled = first->GetOrCreate(req, CountingCompile(req, &calls), &o);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(o, Origin::kCompiled);
  EXPECT_EQ(compiled->key, req.key);
  EXPECT_GT(compiled->meta.created_unix, 0);
  EXPECT_TRUE(std::filesystem::exists(EntryPath(dir.path(), req.key)));
  Stats s = first->stats();
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits_disk + s.hits_memory, 0u);

  auto second = CubinCache::Open(DirOptions(dir.path()));
  StatusOr<Entry> disk = second->GetOrCreate(req, CountingCompile(req, &calls), &o);
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_EQ(o, Origin::kDiskHit);
  StatusOr<Entry> mem = second->GetOrCreate(req, CountingCompile(req, &calls), &o);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ(o, Origin::kMemoryHit);
  s = second->stats();
  EXPECT_EQ(s.hits_disk, 1u);
  EXPECT_EQ(s.hits_memory, 1u);
  EXPECT_EQ(s.compiles, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.corrupt, 0u);
  EXPECT_EQ(calls.load(), 1);

  EXPECT_EQ(compiled->cubin, FakeCubin(req.key));
  EXPECT_EQ(disk->cubin, compiled->cubin);
  EXPECT_EQ(mem->cubin, compiled->cubin);
  // The metadata round-trips through the file, escapes included.
  EXPECT_EQ(disk->meta.options, compiled->meta.options);
  ASSERT_EQ(disk->meta.kernels.size(), 2u);
  EXPECT_EQ(disk->meta.kernels[1].name_expression, "k<2>");
  EXPECT_EQ(disk->meta.kernels[1].resources.lowered_name, "_Z1kILi2EEvv");
  EXPECT_EQ(disk->meta.kernels[1].resources.registers, 96);
  EXPECT_EQ(disk->meta.kernels[1].resources.spill_store_bytes, 8);
  EXPECT_EQ(disk->meta.kernels[0].resources.spill_load_bytes, 4);
  EXPECT_EQ(disk->meta.kernels[0].resources.shared_bytes, 1024);
  EXPECT_EQ(disk->meta.kernels[0].resources.stack_bytes, 16);
  EXPECT_DOUBLE_EQ(disk->meta.compile_ms, 12.5);
  EXPECT_EQ(disk->meta.created_unix, compiled->meta.created_unix);
  EXPECT_EQ(disk->meta.family, "fake");
  EXPECT_EQ(disk->meta.specialization, "s1");
}

TEST(CacheTiers, CompileErrorIsReturnedAndNothingIsWritten) {
  TempDir dir;
  const Request req = FakeRequest(2);
  auto cache = CubinCache::Open(DirOptions(dir.path()));
  StatusOr<Entry> r = cache->GetOrCreate(req, [] () -> StatusOr<Entry> {
    return absl::InvalidArgumentError("prog.cu(3): error: expected a ';'");
  });
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "prog.cu(3): error: expected a ';'");
  EXPECT_FALSE(std::filesystem::exists(EntryPath(dir.path(), req.key)));
  // The failure is not cached: the next call compiles again.
  std::atomic<int> calls{0};
  Origin o;
  ASSERT_TRUE(cache->GetOrCreate(req, CountingCompile(req, &calls), &o).ok());
  EXPECT_EQ(o, Origin::kCompiled);
  EXPECT_EQ(cache->stats().compiles, 2u);
}

TEST(CacheTiers, CompileResultForAnotherArchIsRejected) {
  TempDir dir;
  const Request req = FakeRequest(3, "sm_120");
  auto cache = CubinCache::Open(DirOptions(dir.path()));
  Request other = req;
  other.arch = "sm_120a";
  StatusOr<Entry> r = cache->GetOrCreate(req, [&] { return FakeEntry(other); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(std::filesystem::exists(EntryPath(dir.path(), req.key)));
}

TEST(CacheTiers, InvalidKeyIsRejected) {
  auto cache = CubinCache::Open(Options{.dir = "", .max_bytes = 0, .memory_only = true});
  Request req = FakeRequest(4);
  req.key = "../../etc/passwd";
  std::atomic<int> calls{0};
  EXPECT_EQ(cache->GetOrCreate(req, CountingCompile(req, &calls)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls.load(), 0);
}

TEST(CacheTiers, MemoryOnlyCachesInProcess) {
  auto cache = CubinCache::Open(Options{.dir = "", .max_bytes = 0, .memory_only = true});
  EXPECT_TRUE(cache->memory_only());
  const Request req = FakeRequest(5);
  std::atomic<int> calls{0};
  Origin o;
  ASSERT_TRUE(cache->GetOrCreate(req, CountingCompile(req, &calls), &o).ok());
  EXPECT_EQ(o, Origin::kCompiled);
  ASSERT_TRUE(cache->GetOrCreate(req, CountingCompile(req, &calls), &o).ok());
  EXPECT_EQ(o, Origin::kMemoryHit);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(cache->List().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache->DiskUsage().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CacheTiers, DirectoryFromEnvironment) {
  TempDir dir;
  setenv("KJIT_CACHE_DIR", (dir.path() + "/from-env").c_str(), 1);
  setenv("KJIT_CACHE_MAX_BYTES", "12345", 1);
  auto cache = CubinCache::Open(Options{});
  unsetenv("KJIT_CACHE_DIR");
  unsetenv("KJIT_CACHE_MAX_BYTES");
  EXPECT_EQ(cache->dir(), dir.path() + "/from-env");
  EXPECT_EQ(cache->max_bytes(), 12345u);
  EXPECT_FALSE(cache->memory_only()) << cache->warning();
  setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  EXPECT_EQ(CubinCache::Open(Options{})->dir(), dir.path() + "/kjit");
  unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace kjit::cache
