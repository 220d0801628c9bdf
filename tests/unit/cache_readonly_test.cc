// An unusable cache directory degrades to memory-only with a warning; the caller still gets its
// cubin. Tests run as root in CI, where chmod 0555 stops nothing, so unusable directories are
// made in ways that bind root too: a path below a regular file (ENOTDIR), a directory replaced by
// a file while open, and a file-size limit (RLIMIT_FSIZE) standing in for a full disk.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "jit_cache/cubin_cache.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

bool HasEntryFiles(const std::string& dir) {
  std::error_code ec;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (f.path().extension() == ".cubin" || name.rfind(".tmp-", 0) == 0) return true;
  }
  return false;
}

TEST(CacheReadOnly, DirectoryBelowARegularFileIsMemoryOnly) {
  TempDir tmp;
  const std::string file = tmp.path() + "/not-a-dir";
  WriteFileBytes(file, "x");
  const std::string dir = file + "/cache";
  auto cache = CubinCache::Open(DirOptions(dir));
  EXPECT_TRUE(cache->memory_only());
  EXPECT_NE(cache->warning().find(dir), std::string::npos) << cache->warning();
  EXPECT_NE(cache->warning().find("memory only"), std::string::npos) << cache->warning();

  const Request req = FakeRequest(700);
  std::atomic<int> calls{0};
  Origin o;
  StatusOr<Entry> e = cache->GetOrCreate(req, CountingCompile(req, &calls), &o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(o, Origin::kCompiled);
  EXPECT_EQ(e->cubin, FakeCubin(req.key));
  ASSERT_TRUE(cache->GetOrCreate(req, CountingCompile(req, &calls), &o).ok());
  EXPECT_EQ(o, Origin::kMemoryHit);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(cache->Gc(0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CacheReadOnly, DirectoryLostWhileOpenDegrades) {
  TempDir tmp;
  auto cache = CubinCache::Open(DirOptions(tmp.path()));
  ASSERT_FALSE(cache->memory_only()) << cache->warning();
  std::filesystem::remove_all(tmp.path() + "/v1");
  WriteFileBytes(tmp.path() + "/v1", "squatter");
  const Request req = FakeRequest(701);
  std::atomic<int> calls{0};
  Origin o;
  StatusOr<Entry> e = cache->GetOrCreate(req, CountingCompile(req, &calls), &o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(o, Origin::kCompiled);
  EXPECT_TRUE(cache->memory_only());
  EXPECT_NE(cache->warning().find("memory only"), std::string::npos) << cache->warning();
  ASSERT_TRUE(cache->GetOrCreate(req, CountingCompile(req, &calls), &o).ok());
  EXPECT_EQ(o, Origin::kMemoryHit);
}

// Runs in a child: the file-size limit must not reach the test process.
int FullDiskChild(const std::string& dir) {
  auto cache = CubinCache::Open(DirOptions(dir));
  if (cache->memory_only()) return 10;
  signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing us
  struct rlimit lim = {2000, 2000};
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 11;
  const Request req = FakeRequest(702);
  std::atomic<int> calls{0};
  Origin o;
  StatusOr<Entry> e = cache->GetOrCreate(req, CountingCompile(req, &calls, 8000), &o);
  if (!e.ok()) return 12;
  if (o != Origin::kCompiled || e->cubin != FakeCubin(req.key, 8000)) return 13;
  if (cache->stats().write_failures != 1) return 14;
  if (!cache->memory_only() || cache->warning().find("memory only") == std::string::npos) return 15;
  if (!cache->GetOrCreate(req, CountingCompile(req, &calls, 8000), &o).ok() || o != Origin::kMemoryHit) return 16;
  return calls.load() == 1 ? 0 : 17;
}

TEST(CacheReadOnly, FailedWriteDegradesAndLeavesNoFiles) {
  TempDir tmp;
  pid_t pid = fork();
  if (pid == 0) _exit(FullDiskChild(tmp.path()));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see FullDiskChild for the failed check";
  EXPECT_FALSE(HasEntryFiles(tmp.path()));
}

}  // namespace
}  // namespace kjit::cache
