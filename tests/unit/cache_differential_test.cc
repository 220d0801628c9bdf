// Real NVRTC through KernelCompiler: a fresh compile, a disk hit and a memory hit give
// byte-identical cubins and the same kernel report; an uncached compile gives the same bytes too.
#include <gtest/gtest.h>

#include <set>

#include "jit_cache/cubin_cache.h"
#include "runtime/kernels/registry.h"
#include "runtime/kernels/kernel_compiler.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using kernels::CompiledKernel;
using testing::DirOptions;
using testing::TempDir;

const kernels::Specialization& SmallestSpec() {
  for (const auto& s : kernels::Catalog()) {
    if (s.family == "mla_verify_naive") return s;
  }
  return kernels::Catalog().front();
}

void ExpectSameKernels(const CompiledKernel& a, const CompiledKernel& b) {
  EXPECT_EQ(a.cubin, b.cubin);
  EXPECT_EQ(a.lowered_names, b.lowered_names);
  ASSERT_EQ(a.resources.size(), b.resources.size());
  for (size_t i = 0; i < a.resources.size(); ++i) {
    EXPECT_EQ(a.resources[i].lowered_name, b.resources[i].lowered_name);
    EXPECT_EQ(a.resources[i].registers, b.resources[i].registers);
    EXPECT_EQ(a.resources[i].spill_store_bytes, b.resources[i].spill_store_bytes);
    EXPECT_EQ(a.resources[i].shared_bytes, b.resources[i].shared_bytes);
  }
}

TEST(CacheDifferential, CompiledDiskAndMemoryAreByteIdentical) {
  ASSERT_FALSE(kernels::Catalog().empty());
  const kernels::Specialization& spec = SmallestSpec();
  TempDir dir;

  auto cold_cache = CubinCache::Open(DirOptions(dir.path()));
  kernels::KernelCompiler cold(cold_cache.get(), 1);
  StatusOr<CompiledKernel> compiled = cold.Get(spec, "sm_90");
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiled->origin, CompiledKernel::Origin::kCompiled);
  EXPECT_FALSE(compiled->cubin.empty());
  EXPECT_TRUE(IsValidKey(compiled->cache_key));
  EXPECT_EQ(cold_cache->stats().compiles, 1u);
  ASSERT_FALSE(compiled->lowered_names.empty());
  EXPECT_FALSE(compiled->lowered_names[0].second.empty());

  auto warm_cache = CubinCache::Open(DirOptions(dir.path()));
  kernels::KernelCompiler warm(warm_cache.get(), 1);
  StatusOr<CompiledKernel> disk = warm.Get(spec, "sm_90");
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_EQ(disk->origin, CompiledKernel::Origin::kDiskHit);
  StatusOr<CompiledKernel> memory = warm.Get(spec, "sm_90");
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->origin, CompiledKernel::Origin::kMemoryHit);
  const Stats s = warm_cache->stats();
  EXPECT_EQ(s.compiles, 0u);
  EXPECT_EQ(s.hits_disk, 1u);
  EXPECT_EQ(s.hits_memory, 1u);
  EXPECT_EQ(disk->cache_key, compiled->cache_key);

  ExpectSameKernels(*compiled, *disk);
  ExpectSameKernels(*compiled, *memory);

  // Repeated NVRTC compiles are deterministic, so the cache never changes what runs.
  kernels::KernelCompiler uncached(nullptr, 1);
  StatusOr<CompiledKernel> fresh = uncached.Get(spec, "sm_90");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->cubin, compiled->cubin);
}

TEST(CacheDifferential, ArchVariantsAreSeparateEntries) {
  const kernels::Specialization& spec = SmallestSpec();
  TempDir dir;
  auto cache = CubinCache::Open(DirOptions(dir.path()));
  kernels::KernelCompiler compiler(cache.get(), 2);
  auto results = compiler.GetAll({spec}, {"sm_90", "sm_90a"});
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_NE(results[0]->cache_key, results[1]->cache_key);
  EXPECT_EQ(cache->stats().compiles, 2u);
  StatusOr<std::vector<ListedEntry>> listed = cache->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  std::set<std::string> archs = {(*listed)[0].meta.arch, (*listed)[1].meta.arch};
  EXPECT_EQ(archs, (std::set<std::string>{"sm_90", "sm_90a"}));
  // DiskUsage counts the same files from the directory alone.
  StatusOr<CubinCache::DiskUsageReport> usage = cache->DiskUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->entries, 2u);
  EXPECT_EQ(usage->bytes, (*listed)[0].file_bytes + (*listed)[1].file_bytes);
}

}  // namespace
}  // namespace kjit::cache
