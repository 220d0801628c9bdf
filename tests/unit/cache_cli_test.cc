// The `kjit` tool as a user runs it: exit codes, --help everywhere, tables and JSON, and a real
// catalog compile that the second run serves from disk.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "jit_cache/cubin_cache.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

#ifndef KJIT_CLI_PATH
#error "KJIT_CLI_PATH (the kjit binary) is defined by tests/unit/CMakeLists.txt"
#endif

std::string KjitPath() { return KJIT_CLI_PATH; }

struct CliRun {
  int code = -1;
  std::string out;  // stdout and stderr
};

CliRun Kjit(const std::string& args) {
  CliRun r;
  FILE* p = popen((KjitPath() + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class KjitCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(KjitPath())) << KjitPath();
  }
  // Three fake entries written by a process that is gone.
  std::vector<Request> Fill() {
    std::vector<Request> reqs;
    auto cache = CubinCache::Open(DirOptions(dir_.path()));
    std::atomic<int> calls{0};
    for (int i = 0; i < 3; ++i) {
      reqs.push_back(FakeRequest(800 + i));
      EXPECT_TRUE(cache->GetOrCreate(reqs.back(), CountingCompile(reqs.back(), &calls)).ok());
    }
    return reqs;
  }
  std::string Dir() const { return " --cache-dir " + dir_.path(); }
  TempDir dir_;
};

TEST_F(KjitCli, HelpAndUsageErrors) {
  for (const char* cmd : {"--help", "compile --help", "cache --help", "cache ls --help", "cache show --help",
                          "cache verify --help", "cache gc --help", "cache clear --help", "cache stats --help",
                          "status --help"}) {
    CliRun r = Kjit(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("usage: kjit"), std::string::npos) << cmd;
  }
  EXPECT_EQ(Kjit("").code, 2);
  EXPECT_EQ(Kjit("frobnicate").code, 2);
  EXPECT_EQ(Kjit("cache").code, 2);
  EXPECT_EQ(Kjit("cache ls --bogus").code, 2);
  EXPECT_EQ(Kjit("cache show").code, 2);
  EXPECT_EQ(Kjit("cache gc --max-bytes lots" + Dir()).code, 2);
  EXPECT_EQ(Kjit("compile").code, 2);
  EXPECT_EQ(Kjit("status --bogus").code, 2);
  EXPECT_EQ(Kjit("status --deadline-ms 0").code, 2);
  EXPECT_EQ(Kjit("status extra").code, 2);
  EXPECT_EQ(Kjit("cache stats --target unix:///x.sock" + Dir()).code, 2);
  EXPECT_EQ(Kjit("compile --arch sm_120 --kernel no_such_family" + Dir()).code, 2);
  CliRun bad_arch = Kjit("compile --arch sm_120,sm_99" + Dir());
  EXPECT_EQ(bad_arch.code, 2);
  EXPECT_NE(bad_arch.out.find("sm_99"), std::string::npos) << bad_arch.out;
  EXPECT_NE(bad_arch.out.find("sm_120a"), std::string::npos) << "lists the supported archs: " << bad_arch.out;
}

TEST_F(KjitCli, LsShowVerifyGcClear) {
  std::vector<Request> reqs = Fill();
  CliRun ls = Kjit("cache ls" + Dir());
  ASSERT_EQ(ls.code, 0) << ls.out;
  for (const auto& r : reqs) EXPECT_NE(ls.out.find(r.key.substr(0, 16)), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("fake/s801"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("3 entries"), std::string::npos) << ls.out;
  CliRun json = Kjit("cache ls --json" + Dir());
  ASSERT_EQ(json.code, 0);
  EXPECT_NE(json.out.find("\"key\": \"" + reqs[2].key + "\""), std::string::npos) << json.out;

  CliRun show = Kjit("cache show " + reqs[1].key.substr(0, 10) + Dir());
  ASSERT_EQ(show.code, 0) << show.out;
  EXPECT_NE(show.out.find(reqs[1].key), std::string::npos);
  EXPECT_NE(show.out.find("_Z1kILi2EEvv"), std::string::npos) << show.out;
  EXPECT_EQ(Kjit("cache show 0123456789abcdef" + Dir()).code, 1);

  EXPECT_EQ(Kjit("cache verify" + Dir()).code, 0);
  WriteFileBytes(EntryPath(dir_.path(), reqs[0].key), "not a cubin");
  CliRun verify = Kjit("cache verify" + Dir());
  EXPECT_EQ(verify.code, 1) << verify.out;
  EXPECT_NE(verify.out.find(reqs[0].key + ".cubin"), std::string::npos) << verify.out;
  EXPECT_EQ(Kjit("cache verify" + Dir()).code, 0);

  const uint64_t one = std::filesystem::file_size(EntryPath(dir_.path(), reqs[1].key));
  CliRun gc = Kjit("cache gc --json --max-bytes " + std::to_string(one) + Dir());
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("\"removed\": 1"), std::string::npos) << gc.out;
  EXPECT_EQ(Kjit("cache clear" + Dir()).code, 0);
  EXPECT_NE(Kjit("cache ls" + Dir()).out.find("0 entries"), std::string::npos);
}

// `kjit cache stats --cache-dir` reads a directory; without it the daemon is asked, and a daemon
// that is not there is a failure (exit 1) that names the target, within the deadline.
TEST_F(KjitCli, CacheStatsOfADirectoryAndOfAMissingDaemon) {
  Fill();
  CliRun r = Kjit("cache stats --json" + Dir());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"entries\": 3"), std::string::npos) << r.out;
  const std::string target = "unix://" + dir_.path() + "/no-daemon.sock";
  for (const char* cmd : {"cache stats", "status", "status --health"}) {
    const auto t0 = std::chrono::steady_clock::now();
    CliRun gone = Kjit(std::string(cmd) + " --deadline-ms 2000 --target " + target);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << cmd;
    EXPECT_EQ(gone.code, 1) << cmd << "\n" << gone.out;
    EXPECT_NE(gone.out.find("cannot reach kjitd at " + target), std::string::npos) << cmd << "\n" << gone.out;
  }
}

TEST_F(KjitCli, UnusableDirectoryIsAFailure) {
  WriteFileBytes(dir_.path() + "/file", "x");
  CliRun r = Kjit("cache ls --cache-dir " + dir_.path() + "/file/cache");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("memory only"), std::string::npos) << r.out;
}

TEST_F(KjitCli, CompileThenServeFromDisk) {
  const std::string args = "compile --arch sm_90 --kernel mla_verify_naive/bool" + Dir();
  CliRun first = Kjit(args);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_NE(first.out.find("[1/1] mla_verify_naive/bool sm_90: compiled"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("kjit::naive::mla_verify_naive<false>"), std::string::npos) << first.out;
  CliRun second = Kjit(args);
  ASSERT_EQ(second.code, 0) << second.out;
  EXPECT_NE(second.out.find("[1/1] mla_verify_naive/bool sm_90: disk"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("0 compiled, 1 from disk"), std::string::npos) << second.out;
  CliRun ls = Kjit("cache ls" + Dir());
  EXPECT_NE(ls.out.find("mla_verify_naive/bool"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("sm_90"), std::string::npos) << ls.out;
}

TEST_F(KjitCli, CompileShowsTheArchSpecificTargetOfMlaVerifyOnSm90) {
  CliRun run = Kjit("compile --arch sm_90 --kernel mla_verify/h8_bool" + Dir());
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_NE(run.out.find("sm_90 as sm_90a"), std::string::npos) << run.out;
  CliRun ls = Kjit("cache ls" + Dir());
  EXPECT_NE(ls.out.find("sm_90a"), std::string::npos) << ls.out;
}

}  // namespace
}  // namespace kjit::cache
