// LRU by kjit's own last-used stamp, within a byte cap, never removing an entry in use.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>

#include "jit_cache/cubin_cache.h"
#include "jit_cache/entry_file.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

constexpr size_t kCubinBytes = 10000;

void SetLastUsed(const std::string& path, int64_t t) {
  int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  const std::string b = internal::EncodeLastUsed(t);
  ASSERT_EQ(pwrite(fd, b.data(), b.size(), internal::kLastUsedOffset), 8);
  close(fd);
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/v1")) {
    if (f.path().extension() == ".cubin") total += f.file_size();
  }
  return total;
}

// n entries written by processes that are gone (nothing pinned), stamps 1000, 2000, ...
std::vector<Request> Fill(const std::string& dir, int n, uint64_t* entry_bytes) {
  std::vector<Request> reqs;
  std::atomic<int> calls{0};
  for (int i = 0; i < n; ++i) {
    reqs.push_back(FakeRequest(500 + i));
    auto cache = CubinCache::Open(DirOptions(dir));
    EXPECT_TRUE(cache->GetOrCreate(reqs.back(), CountingCompile(reqs.back(), &calls, kCubinBytes)).ok());
    SetLastUsed(EntryPath(dir, reqs.back().key), 1000 * (i + 1));
    *entry_bytes = std::filesystem::file_size(EntryPath(dir, reqs.back().key));
  }
  return reqs;
}

TEST(CacheEviction, GcRemovesLeastRecentlyUsedUntilUnderCap) {
  TempDir dir;
  uint64_t entry_bytes = 0;
  std::vector<Request> reqs = Fill(dir.path(), 5, &entry_bytes);
  // Make entry 0 the most recent: LRU follows the stamp, not creation order.
  SetLastUsed(EntryPath(dir.path(), reqs[0].key), 9000);
  auto cache = CubinCache::Open(DirOptions(dir.path()));
  const uint64_t cap = 3 * entry_bytes + entry_bytes / 2;
  StatusOr<GcReport> r = cache->Gc(cap);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes_before, 5 * entry_bytes);
  EXPECT_EQ(r->removed, 2u);
  EXPECT_EQ(r->bytes_after, 3 * entry_bytes);
  EXPECT_LE(DirBytes(dir.path()), cap);
  EXPECT_EQ(cache->stats().evictions, 2u);
  EXPECT_TRUE(std::filesystem::exists(EntryPath(dir.path(), reqs[0].key)));
  EXPECT_FALSE(std::filesystem::exists(EntryPath(dir.path(), reqs[1].key)));
  EXPECT_FALSE(std::filesystem::exists(EntryPath(dir.path(), reqs[2].key)));
  EXPECT_TRUE(std::filesystem::exists(EntryPath(dir.path(), reqs[3].key)));
  EXPECT_TRUE(std::filesystem::exists(EntryPath(dir.path(), reqs[4].key)));
}

TEST(CacheEviction, EntriesInUseAreNeverRemoved) {
  TempDir dir;
  uint64_t entry_bytes = 0;
  std::vector<Request> reqs = Fill(dir.path(), 4, &entry_bytes);
  // Another cache (as another process would) loads the oldest entry and keeps it.
  auto user = CubinCache::Open(DirOptions(dir.path()));
  Origin o;
  std::atomic<int> calls{0};
  ASSERT_TRUE(user->GetOrCreate(reqs[0], CountingCompile(reqs[0], &calls), &o).ok());
  ASSERT_EQ(o, Origin::kDiskHit);
  SetLastUsed(EntryPath(dir.path(), reqs[0].key), 1);  // oldest of all

  auto admin = CubinCache::Open(DirOptions(dir.path()));
  StatusOr<std::vector<ListedEntry>> listed = admin->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 4u);
  for (const auto& l : *listed) EXPECT_EQ(l.in_use, l.key == reqs[0].key) << l.key;

  StatusOr<GcReport> r = admin->Clear();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->removed, 3u);
  EXPECT_EQ(r->skipped_in_use, 1u);
  EXPECT_EQ(r->bytes_after, entry_bytes);
  EXPECT_TRUE(std::filesystem::exists(EntryPath(dir.path(), reqs[0].key)));
  // Once its user is gone the entry is no longer in use.
  user.reset();
  r = admin->Clear();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->removed, 1u);
  EXPECT_EQ(DirBytes(dir.path()), 0u);
}

TEST(CacheEviction, WritesKeepTheByteCap) {
  TempDir dir;
  uint64_t entry_bytes = 0;
  Fill(dir.path(), 1, &entry_bytes);
  const uint64_t cap = 3 * entry_bytes;
  std::atomic<int> calls{0};
  for (int i = 0; i < 8; ++i) {
    const Request req = FakeRequest(600 + i);
    auto cache = CubinCache::Open(DirOptions(dir.path(), cap));
    ASSERT_TRUE(cache->GetOrCreate(req, CountingCompile(req, &calls, kCubinBytes)).ok());
    EXPECT_TRUE(std::filesystem::exists(EntryPath(dir.path(), req.key)));  // the newest stays
    EXPECT_LE(DirBytes(dir.path()), cap) << "after write " << i;
  }
}

TEST(CacheEviction, DiskHitRefreshesTheStamp) {
  TempDir dir;
  uint64_t entry_bytes = 0;
  std::vector<Request> reqs = Fill(dir.path(), 1, &entry_bytes);
  const int64_t before = std::time(nullptr);
  auto cache = CubinCache::Open(DirOptions(dir.path()));
  std::atomic<int> calls{0};
  StatusOr<Entry> e = cache->GetOrCreate(reqs[0], CountingCompile(reqs[0], &calls));
  ASSERT_TRUE(e.ok());
  EXPECT_GE(e->meta.last_used_unix, before);
  const std::string header = ReadFileBytes(EntryPath(dir.path(), reqs[0].key)).substr(0, internal::kHeaderBytes);
  EXPECT_GE(internal::DecodeLastUsed(header), before);
  // The stamp is outside the checksum: the refreshed file still verifies.
  StatusOr<VerifyReport> v = cache->Verify();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->ok, 1u);
}

}  // namespace
}  // namespace kjit::cache
