// A cache directory that fails never stops the caller, and never takes the whole cache down with
// one failure: an unusable directory is memory-only, a read-only one is still read, a failed write
// keeps only that entry in memory. Tests run as root in CI, where chmod 0555 stops nothing, so
// failures are made in ways that bind root too: a path below a regular file (ENOTDIR), a directory
// replaced by a file while open, a file-size limit (RLIMIT_FSIZE) standing in for a full disk, and
// a child that drops to an unprivileged uid for a read-only directory.
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

// The entries directory replaced by a file under a running cache: the lookup still returns the
// compile, says why nothing was written, and keeps the entry in memory.
TEST(CacheReadOnly, DirectoryLostWhileOpenStillServes) {
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
  EXPECT_EQ(e->cubin, FakeCubin(req.key));
  EXPECT_NE(cache->warning().find("compile lock"), std::string::npos) << cache->warning();
  ASSERT_TRUE(cache->GetOrCreate(req, CountingCompile(req, &calls), &o).ok());
  EXPECT_EQ(o, Origin::kMemoryHit);
  EXPECT_EQ(calls.load(), 1);
}

// Runs in a child: the file-size limit must not reach the test process. `small` was written by
// the parent before; `big` cannot be written under the limit, `fits` can.
int FullDiskChild(const std::string& dir, const Request& small, const Request& big, const Request& fits) {
  auto cache = CubinCache::Open(DirOptions(dir));
  if (cache->memory_only() || cache->read_only()) return 10;
  signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing us
  struct rlimit lim = {2000, 2000};
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 11;
  std::atomic<int> calls{0};
  Origin o;
  StatusOr<Entry> e = cache->GetOrCreate(big, CountingCompile(big, &calls, 8000), &o);
  if (!e.ok()) return 12;
  if (o != Origin::kCompiled || e->cubin != FakeCubin(big.key, 8000)) return 13;
  if (cache->stats().write_failures != 1) return 14;
  if (cache->memory_only() || cache->warning().find("cannot write") == std::string::npos) return 15;
  if (!cache->GetOrCreate(big, CountingCompile(big, &calls, 8000), &o).ok() || o != Origin::kMemoryHit) return 16;
  // The failure is per entry: an entry already on disk is still read, and one that fits is written.
  if (!cache->GetOrCreate(small, CountingCompile(small, &calls, 100), &o).ok() || o != Origin::kDiskHit) return 17;
  if (!cache->GetOrCreate(fits, CountingCompile(fits, &calls, 100), &o).ok() || o != Origin::kCompiled) return 18;
  if (cache->stats().write_failures != 1) return 19;
  return calls.load() == 2 ? 0 : 20;
}

TEST(CacheReadOnly, FailedWriteKeepsThatEntryInMemoryOnly) {
  TempDir tmp;
  const Request small = FakeRequest(702), big = FakeRequest(703), fits = FakeRequest(704);
  std::atomic<int> calls{0};
  ASSERT_TRUE(CubinCache::Open(DirOptions(tmp.path()))->GetOrCreate(small, CountingCompile(small, &calls, 100)).ok());
  pid_t pid = fork();
  if (pid == 0) _exit(FullDiskChild(tmp.path(), small, big, fits));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see FullDiskChild for the failed check";
  EXPECT_FALSE(std::filesystem::exists(EntryPath(tmp.path(), big.key)));
  Origin o;
  auto after = CubinCache::Open(DirOptions(tmp.path()));
  ASSERT_TRUE(after->GetOrCreate(fits, CountingCompile(fits, &calls, 100), &o).ok());
  EXPECT_EQ(o, Origin::kDiskHit) << "the entry written under the limit is on disk";
  for (const auto& f : std::filesystem::directory_iterator(tmp.path() + "/v1")) {
    EXPECT_NE(f.path().filename().string().rfind(".tmp-", 0), 0u) << "temp file left: " << f.path();
  }
}

// A directory this process can read but not write: its entries are served, new ones stay in
// memory, and nothing is removed. As root (CI), chmod binds nothing, so the child drops to an
// unprivileged uid; otherwise the directory is made read-only.
int ReadOnlyChild(const std::string& dir, const Request& on_disk, const Request& fresh) {
  if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) return 30;
  auto cache = CubinCache::Open(DirOptions(dir));
  if (cache->memory_only() || !cache->read_only()) return 31;
  if (cache->warning().find("not writable") == std::string::npos) return 32;
  std::atomic<int> calls{0};
  Origin o;
  StatusOr<Entry> e = cache->GetOrCreate(on_disk, CountingCompile(on_disk, &calls), &o);
  if (!e.ok() || o != Origin::kDiskHit || e->cubin != FakeCubin(on_disk.key)) return 33;
  e = cache->GetOrCreate(fresh, CountingCompile(fresh, &calls), &o);
  if (!e.ok() || o != Origin::kCompiled || calls.load() != 1) return 34;
  if (!cache->GetOrCreate(fresh, CountingCompile(fresh, &calls), &o).ok() || o != Origin::kMemoryHit) return 35;
  if (cache->stats().write_failures != 0) return 36;  // not attempted
  StatusOr<VerifyReport> v = cache->Verify();
  if (!v.ok() || v->checked != 1 || v->ok != 1) return 37;
  StatusOr<std::vector<ListedEntry>> ls = cache->List();
  if (!ls.ok() || ls->size() != 1) return 38;
  if (cache->Gc(0).status().code() != absl::StatusCode::kFailedPrecondition) return 39;
  return 0;
}

TEST(CacheReadOnly, ReadOnlyDirectoryIsStillRead) {
  TempDir tmp;
  const Request on_disk = FakeRequest(705), fresh = FakeRequest(706);
  std::atomic<int> calls{0};
  ASSERT_TRUE(CubinCache::Open(DirOptions(tmp.path()))->GetOrCreate(on_disk, CountingCompile(on_disk, &calls)).ok());
  namespace fs = std::filesystem;
  const auto rx = fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                  fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(tmp.path(), rx);
  fs::permissions(tmp.path() + "/v1", rx);
  fs::permissions(tmp.path() + "/v1/locks", rx);
  fs::permissions(EntryPath(tmp.path(), on_disk.key), fs::perms::owner_read | fs::perms::group_read |
                                                          fs::perms::others_read);
  pid_t pid = fork();
  if (pid == 0) _exit(ReadOnlyChild(tmp.path(), on_disk, fresh));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  fs::permissions(tmp.path(), fs::perms::owner_all);
  fs::permissions(tmp.path() + "/v1", fs::perms::owner_all);
  fs::permissions(tmp.path() + "/v1/locks", fs::perms::owner_all);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see ReadOnlyChild for the failed check";
  EXPECT_TRUE(fs::exists(EntryPath(tmp.path(), on_disk.key)));
  EXPECT_FALSE(fs::exists(EntryPath(tmp.path(), fresh.key)));
}

}  // namespace
}  // namespace kjit::cache
