// Every damaged entry file is a miss: detected, counted, removed and rebuilt; never an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <ostream>
#include <set>

#include "jit_cache/cubin_cache.h"
#include "jit_cache/entry_file.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

struct Damage {
  const char* name;
  std::function<std::string(std::string)> apply;
};

void PrintTo(const Damage& d, std::ostream* os) { *os << d.name; }

class CacheCorruption : public ::testing::TestWithParam<Damage> {};

// Writes a good entry, damages its file, then checks the next process rebuilds it.
TEST_P(CacheCorruption, DetectedCountedRebuilt) {
  TempDir dir;
  const Request req = FakeRequest(7);
  std::atomic<int> calls{0};
  ASSERT_TRUE(CubinCache::Open(DirOptions(dir.path()))->GetOrCreate(req, CountingCompile(req, &calls)).ok());
  const std::string path = EntryPath(dir.path(), req.key);
  const std::string good = ReadFileBytes(path);
  const std::string bad = GetParam().apply(good);
  ASSERT_NE(bad, good);
  WriteFileBytes(path, bad);

  auto cache = CubinCache::Open(DirOptions(dir.path()));
  Origin o = Origin::kDiskHit;
  StatusOr<Entry> e = cache->GetOrCreate(req, CountingCompile(req, &calls), &o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(o, Origin::kCompiled);
  EXPECT_EQ(e->cubin, FakeCubin(req.key));
  EXPECT_EQ(cache->stats().corrupt, 1u);
  EXPECT_EQ(cache->stats().hits_disk, 0u);
  EXPECT_EQ(calls.load(), 2);

  // Rebuilt on disk: a third process gets a good disk hit.
  auto third = CubinCache::Open(DirOptions(dir.path()));
  ASSERT_TRUE(third->GetOrCreate(req, CountingCompile(req, &calls), &o).ok());
  EXPECT_EQ(o, Origin::kDiskHit);
  EXPECT_EQ(calls.load(), 2);
}

std::string FlipBit(std::string s, size_t at) {
  s[at] ^= 0x10;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Files, CacheCorruption,
    ::testing::Values(
        Damage{"truncated_cubin", [](std::string s) { return s.substr(0, s.size() - 100); }},
        Damage{"truncated_header", [](std::string s) { return s.substr(0, 40); }},
        Damage{"empty", [](std::string) { return std::string(); }},
        Damage{"appended", [](std::string s) { return s + "x"; }},
        Damage{"bitflip_cubin", [](std::string s) { return FlipBit(s, s.size() - 17); }},
        Damage{"bitflip_metadata", [](std::string s) { return FlipBit(s, internal::kHeaderBytes + 3); }},
        Damage{"bitflip_key_digest", [](std::string s) { return FlipBit(s, 20); }},
        Damage{"bitflip_checksum", [](std::string s) { return FlipBit(s, 50); }},
        Damage{"bitflip_length", [](std::string s) { return FlipBit(s, 81); }},
        Damage{"other_version", [](std::string s) { s[8] = static_cast<char>(kFormatVersion + 1); return s; }},
        Damage{"foreign", [](std::string s) { return std::string("\x7f" "ELF this is not ours ") + s; }}),
    [](const auto& info) { return std::string(info.param.name); });

// An entry moved under another key's name is caught by the key digest; one whose metadata says
// another arch than the request (e.g. copied from an sm_120a cache) by the arch check.
TEST(CacheCorruptionArch, WrongArchEntryIsReplaced) {
  TempDir dir;
  Request req = FakeRequest(8, "sm_120");
  Request wrong = req;  // same key, entry written for sm_120a
  wrong.arch = "sm_120a";
  std::atomic<int> calls{0};
  ASSERT_TRUE(CubinCache::Open(DirOptions(dir.path()))->GetOrCreate(wrong, CountingCompile(wrong, &calls)).ok());

  auto cache = CubinCache::Open(DirOptions(dir.path()));
  Origin o;
  StatusOr<Entry> e = cache->GetOrCreate(req, CountingCompile(req, &calls), &o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(o, Origin::kCompiled);
  EXPECT_EQ(e->meta.arch, "sm_120");
  EXPECT_EQ(cache->stats().corrupt, 1u);
  cache.reset();
  auto after = CubinCache::Open(DirOptions(dir.path()));
  StatusOr<Entry> again = after->GetOrCreate(req, CountingCompile(req, &calls), &o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(o, Origin::kDiskHit);
  EXPECT_EQ(again->meta.arch, "sm_120");
}

TEST(CacheCorruptionArch, EntryUnderAnotherKeysNameIsReplaced) {
  TempDir dir;
  const Request a = FakeRequest(9), b = FakeRequest(10);
  std::atomic<int> calls{0};
  ASSERT_TRUE(CubinCache::Open(DirOptions(dir.path()))->GetOrCreate(a, CountingCompile(a, &calls)).ok());
  std::filesystem::copy_file(EntryPath(dir.path(), a.key), EntryPath(dir.path(), b.key));
  auto cache = CubinCache::Open(DirOptions(dir.path()));
  Origin o;
  StatusOr<Entry> e = cache->GetOrCreate(b, CountingCompile(b, &calls), &o);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(o, Origin::kCompiled);
  EXPECT_EQ(e->cubin, FakeCubin(b.key));
  EXPECT_EQ(cache->stats().corrupt, 1u);
}

TEST(CacheVerify, ReportsAndRemovesBadEntriesKeepsGoodOnes) {
  TempDir dir;
  std::atomic<int> calls{0};
  std::vector<Request> reqs;
  {
    auto cache = CubinCache::Open(DirOptions(dir.path()));
    for (int i = 0; i < 4; ++i) {
      reqs.push_back(FakeRequest(20 + i));
      ASSERT_TRUE(cache->GetOrCreate(reqs.back(), CountingCompile(reqs.back(), &calls)).ok());
    }
  }
  const std::string p1 = EntryPath(dir.path(), reqs[1].key), p3 = EntryPath(dir.path(), reqs[3].key);
  WriteFileBytes(p1, FlipBit(ReadFileBytes(p1), 300));
  WriteFileBytes(p3, "garbage");
  auto cache = CubinCache::Open(DirOptions(dir.path()));
  StatusOr<VerifyReport> r = cache->Verify();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checked, 4u);
  EXPECT_EQ(r->ok, 2u);
  ASSERT_EQ(r->bad.size(), 2u);
  std::set<std::string> bad_names = {r->bad[0].first, r->bad[1].first};
  EXPECT_TRUE(bad_names.count(reqs[1].key + ".cubin"));
  EXPECT_TRUE(bad_names.count(reqs[3].key + ".cubin"));
  EXPECT_FALSE(std::filesystem::exists(p1));
  EXPECT_FALSE(std::filesystem::exists(p3));
  EXPECT_EQ(cache->stats().corrupt, 2u);
  StatusOr<VerifyReport> again = cache->Verify();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->checked, 2u);
  EXPECT_TRUE(again->bad.empty());
}

}  // namespace
}  // namespace kjit::cache
