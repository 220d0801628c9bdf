// Entry files that are not entries: a FIFO, directories, symbolic links, a 64 GiB sparse file.
// Each must be a miss logged with its reason, replaced where it can be, and never a hang, an abort
// or a read through a link; the cache's other entries keep being served, and `kjit cache`
// ls/show/verify answer about them in bounded time. Every check runs in a child under alarm(), so
// a hang fails the test instead of wedging it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <ostream>

#include "jit_cache/cubin_cache.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;
namespace fs = std::filesystem;

constexpr unsigned kChildSeconds = 30;

// Runs fn() in a child process with an alarm; its return value is the exit code (0 = pass).
int InChild(const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(kChildSeconds);
    _exit(fn());
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (WIFSIGNALED(status)) return 1000 + WTERMSIG(status);  // 1014: SIGALRM, a hang; 1006: abort
  return WEXITSTATUS(status);
}

struct Hostile {
  const char* name;
  // Puts the hostile file at `path`; `outside` is a file outside the cache it may point at.
  std::function<void(const std::string& path, const std::string& outside)> plant;
  const char* reason;  // what the log line must say
  bool replaceable;    // the cache can put a real entry there afterwards
};

void PrintTo(const Hostile& h, std::ostream* os) { *os << h.name; }

const Hostile kHostile[] = {
    {"fifo", [](const std::string& p, const std::string&) { ASSERT_EQ(mkfifo(p.c_str(), 0644), 0); },
     "a FIFO", true},
    {"empty_directory", [](const std::string& p, const std::string&) { ASSERT_EQ(mkdir(p.c_str(), 0755), 0); },
     "a directory", true},
    {"full_directory",
     [](const std::string& p, const std::string&) {
       ASSERT_EQ(mkdir(p.c_str(), 0755), 0);
       WriteFileBytes(p + "/keep", "not ours to remove");
     },
     "a directory", false},
    {"symlink_outside",
     [](const std::string& p, const std::string& outside) { ASSERT_EQ(symlink(outside.c_str(), p.c_str()), 0); },
     "symbolic link", true},
    {"dangling_symlink",
     [](const std::string& p, const std::string& outside) {
       ASSERT_EQ(symlink((outside + ".absent").c_str(), p.c_str()), 0);
     },
     "symbolic link", true},
    {"sparse_64GiB",
     [](const std::string& p, const std::string&) {
       int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
       ASSERT_GE(fd, 0);
       ASSERT_EQ(ftruncate(fd, off_t{64} << 30), 0);
       close(fd);
     },
     "more than the", true},
};

class CacheHostileEntry : public ::testing::TestWithParam<Hostile> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    outside_ = outside_dir_.path() + "/secret";
    WriteFileBytes(outside_, kSecret);
    std::atomic<int> calls{0};
    ASSERT_TRUE(CubinCache::Open(DirOptions(dir_.path()))->GetOrCreate(good_, CountingCompile(good_, &calls)).ok());
  }
  static constexpr const char* kSecret = "root-only bytes that no cache entry may expose";
  TempDir dir_, outside_dir_;
  std::string outside_;
  const Request good_ = FakeRequest(900);
  const Request bad_ = FakeRequest(901);
};

TEST_P(CacheHostileEntry, LookupIsAMissReplacedAndLoggedOnce) {
  const Hostile& h = GetParam();
  const std::string path = EntryPath(dir_.path(), bad_.key);
  h.plant(path, outside_);
  if (HasFatalFailure()) return;

  const int code = InChild([&] {
    auto cache = CubinCache::Open(DirOptions(dir_.path()));
    if (cache->memory_only() || cache->read_only()) return 10;
    std::atomic<int> calls{0};
    Origin o;
    StatusOr<Entry> e = cache->GetOrCreate(bad_, CountingCompile(bad_, &calls), &o);
    if (!e.ok() || o != Origin::kCompiled || e->cubin != FakeCubin(bad_.key)) return 11;
    if (cache->warning().find(h.reason) == std::string::npos) return 12;
    if (cache->memory_only()) return 13;
    // The rest of the cache is untouched by the bad entry.
    e = cache->GetOrCreate(good_, CountingCompile(good_, &calls), &o);
    if (!e.ok() || o != Origin::kDiskHit || calls.load() != 1) return 14;
    // A second process sees what the first left: a real entry where it could write one.
    auto next = CubinCache::Open(DirOptions(dir_.path()));
    e = next->GetOrCreate(bad_, CountingCompile(bad_, &calls), &o);
    if (!e.ok() || e->cubin != FakeCubin(bad_.key)) return 15;
    if (o != (h.replaceable ? Origin::kDiskHit : Origin::kCompiled)) return 16;
    return 0;
  });
  EXPECT_EQ(code, 0) << "see the child's checks (1014 is a hang, 1006 an abort)";
  EXPECT_EQ(ReadFileBytes(outside_), kSecret) << "a link target outside the cache was changed";
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_EQ(S_ISREG(st.st_mode), h.replaceable) << "replaced by a real entry where it could be";
}

INSTANTIATE_TEST_SUITE_P(Files, CacheHostileEntry, ::testing::ValuesIn(kHostile),
                         [](const auto& info) { return std::string(info.param.name); });

// All of them at once under the maintenance commands: ls lists the good entry only, show names the
// defect, verify reports every one and removes all but the full directory; the CLI the same.
class CacheHostileMaintenance : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    outside_ = outside_dir_.path() + "/secret";
    WriteFileBytes(outside_, "secret");
    std::atomic<int> calls{0};
    ASSERT_TRUE(CubinCache::Open(DirOptions(dir_.path()))->GetOrCreate(good_, CountingCompile(good_, &calls)).ok());
    int n = 910;
    for (const Hostile& h : kHostile) {
      planted_.push_back(FakeRequest(n++));
      h.plant(EntryPath(dir_.path(), planted_.back().key), outside_);
      if (HasFatalFailure()) return;
    }
  }
  TempDir dir_, outside_dir_;
  std::string outside_;
  const Request good_ = FakeRequest(900);
  std::vector<Request> planted_;
};

TEST_F(CacheHostileMaintenance, LsShowVerifyAnswerAndVerifyRemoves) {
  const int code = InChild([&] {
    auto cache = CubinCache::Open(DirOptions(dir_.path()));
    StatusOr<std::vector<ListedEntry>> ls = cache->List();
    if (!ls.ok() || ls->size() != 1 || (*ls)[0].key != good_.key) return 20;
    for (size_t i = 0; i < planted_.size(); ++i) {
      StatusOr<Entry> shown = cache->Show(planted_[i].key);
      if (shown.ok()) return 21;
      if (std::string(shown.status().message()).find(kHostile[i].reason) == std::string::npos) return 22;
    }
    StatusOr<VerifyReport> v = cache->Verify();
    if (!v.ok() || v->checked != planted_.size() + 1 || v->ok != 1 || v->bad.size() != planted_.size()) return 23;
    for (const auto& [file, why] : v->bad) {
      const bool left = why.find("left in place") != std::string::npos;
      const bool full_dir = file.rfind(planted_[2].key, 0) == 0;
      if (left != full_dir) return 24;
    }
    return 0;
  });
  EXPECT_EQ(code, 0) << "see the child's checks (1014 is a hang, 1006 an abort)";
  for (size_t i = 0; i < planted_.size(); ++i) {
    struct stat st;
    const bool present = lstat(EntryPath(dir_.path(), planted_[i].key).c_str(), &st) == 0;
    EXPECT_EQ(present, !kHostile[i].replaceable) << kHostile[i].name;
  }
  EXPECT_EQ(ReadFileBytes(outside_), "secret");
  EXPECT_TRUE(fs::exists(EntryPath(dir_.path(), good_.key)));
}

#ifdef KJIT_CLI_PATH
// The same through `kjit cache`, bounded by timeout(1): 124 would be a hang, 134 an abort.
int KjitExit(const std::string& args, std::string* out) {
  FILE* p = popen(("timeout 30 " + std::string(KJIT_CLI_PATH) + " " + args + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(CacheHostileMaintenance, CliLsShowVerifyAnswer) {
  const std::string dir = " --cache-dir " + dir_.path();
  std::string out;
  EXPECT_EQ(KjitExit("cache ls" + dir, &out), 0) << out;
  EXPECT_NE(out.find("1 entries"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(KjitExit("cache show " + planted_[0].key + dir, &out), 1) << out;
  EXPECT_NE(out.find("FIFO"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(KjitExit("cache verify --json" + dir, &out), 1) << out;
  EXPECT_NE(out.find("\"checked\": " + std::to_string(planted_.size() + 1)), std::string::npos) << out;
  EXPECT_NE(out.find("left in place"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(KjitExit("cache verify" + dir, &out), 1) << "the full directory is still there: " << out;
  EXPECT_NE(out.find("1 broken"), std::string::npos) << out;
}
#endif

}  // namespace
}  // namespace kjit::cache
