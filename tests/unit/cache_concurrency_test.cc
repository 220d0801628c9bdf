// Processes and threads racing on an empty cache compile each key exactly once; a waiter is told
// what it waits for; a compiler killed while holding the key lock does not wedge the others.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <sstream>
#include <thread>

#include "jit_cache/cubin_cache.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

// Appends one line to a file shared by all processes: the compile side channel.
void AppendLine(const std::string& path, const std::string& line) {
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string l = line + "\n";
  (void)!write(fd, l.data(), l.size());
  close(fd);
}

std::map<std::string, int> CountLines(const std::string& path) {
  std::map<std::string, int> counts;
  std::istringstream in(ReadFileBytes(path));
  for (std::string line; std::getline(in, line);) ++counts[line];
  return counts;
}

// Compile callback: records the key, takes `ms`, returns the deterministic entry.
std::function<StatusOr<Entry>()> MarkedCompile(const Request& r, const std::string& marker, int ms) {
  return [r, marker, ms] {
    AppendLine(marker, r.key);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return FakeEntry(r);
  };
}

// Forks a child that waits until the gate pipe's write end is closed by the parent (if a gate is
// given), runs fn and exits with its result.
pid_t Spawn(const int* gate, const std::function<int()>& fn, const std::string& stderr_path = "") {
  pid_t pid = fork();
  if (pid != 0) return pid;
  alarm(60);  // a wedged child dies instead of hanging the suite
  if (!stderr_path.empty()) {
    int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2);
  }
  if (gate) {
    close(gate[1]);
    char c;
    while (read(gate[0], &c, 1) > 0) {
    }
  }
  _exit(fn());
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Child body: every key in rotated order; 0 when all succeed with the expected bytes.
int FetchAll(const std::string& dir, const std::vector<Request>& reqs, int first,
             const std::string& marker, int ms) {
  auto cache = CubinCache::Open(DirOptions(dir));
  if (cache->memory_only()) return 10;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Request& r = reqs[(first + i) % reqs.size()];
    StatusOr<Entry> e = cache->GetOrCreate(r, MarkedCompile(r, marker, ms));
    if (!e.ok()) return 11;
    if (e->cubin != FakeCubin(r.key)) return 12;
  }
  return 0;
}

TEST(CacheConcurrency, EightProcessesCompileEachKeyOnce) {
  TempDir dir;
  const std::string marker = dir.path() + "/compiles.log";
  const std::string cache_dir = dir.path() + "/cache";
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(FakeRequest(100 + i));
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  std::vector<pid_t> kids;
  for (int p = 0; p < 8; ++p) {
    kids.push_back(Spawn(gate, [&, p] { return FetchAll(cache_dir, reqs, p, marker, 150); }));
  }
  close(gate[1]);  // start them all at once
  close(gate[0]);
  for (pid_t k : kids) EXPECT_EQ(WaitExit(k), 0);
  std::map<std::string, int> counts = CountLines(marker);
  EXPECT_EQ(counts.size(), reqs.size());
  for (const Request& r : reqs) EXPECT_EQ(counts[r.key], 1) << r.specialization;
}

// The holder compiles for 3 s, so the waiter waits well past the 1 s notice even when the
// machine delays its start.
TEST(CacheConcurrency, WaiterIsToldWhatItWaitsFor) {
  TempDir dir;
  const std::string marker = dir.path() + "/compiles.log";
  const std::string cache_dir = dir.path() + "/cache";
  const std::vector<Request> reqs = {FakeRequest(200)};
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  std::vector<pid_t> kids;
  for (int p = 0; p < 2; ++p) {
    kids.push_back(Spawn(gate, [&] { return FetchAll(cache_dir, reqs, 0, marker, 3000); },
                         dir.path() + "/stderr" + std::to_string(p)));
  }
  close(gate[1]);
  close(gate[0]);
  for (pid_t k : kids) EXPECT_EQ(WaitExit(k), 0);
  EXPECT_EQ(CountLines(marker)[reqs[0].key], 1);
  int told = 0;
  for (int p = 0; p < 2; ++p) {
    const std::string err = ReadFileBytes(dir.path() + "/stderr" + std::to_string(p));
    if (err.empty()) continue;
    ++told;
    EXPECT_NE(err.find("waiting for another process compiling fake/s200 for sm_120 (key " +
                       reqs[0].key.substr(0, 12) + ")"), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  EXPECT_EQ(told, 1);
}

TEST(CacheConcurrency, KilledCompilerDoesNotWedgeOthers) {
  TempDir dir;
  const std::string marker = dir.path() + "/compiles.log";
  const std::string cache_dir = dir.path() + "/cache";
  const std::vector<Request> reqs = {FakeRequest(300)};
  pid_t stuck = Spawn(nullptr, [&] { return FetchAll(cache_dir, reqs, 0, marker, 60000); });
  for (int i = 0; i < 2000 && CountLines(marker).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(CountLines(marker)[reqs[0].key], 1) << "first compiler never started";
  pid_t waiter = Spawn(nullptr, [&] { return FetchAll(cache_dir, reqs, 0, marker, 10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(stuck, SIGKILL);
  EXPECT_EQ(WaitExit(stuck), 128 + SIGKILL);
  EXPECT_EQ(WaitExit(waiter), 0);
  EXPECT_EQ(CountLines(marker)[reqs[0].key], 2);  // the killed one and the waiter
  auto cache = CubinCache::Open(DirOptions(cache_dir));
  Origin o;
  std::atomic<int> calls{0};
  ASSERT_TRUE(cache->GetOrCreate(reqs[0], CountingCompile(reqs[0], &calls), &o).ok());
  EXPECT_EQ(o, Origin::kDiskHit);
}

TEST(CacheConcurrency, ThreadsShareOneCompile) {
  TempDir dir;
  auto cache = CubinCache::Open(DirOptions(dir.path()));
  const Request req = FakeRequest(400);
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      StatusOr<Entry> e = cache->GetOrCreate(req, [&] {
        ++calls;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return FakeEntry(req);
      });
      ok[t] = e.ok() && e->cubin == FakeCubin(req.key);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 1);
  for (int t = 0; t < 8; ++t) EXPECT_EQ(ok[t], 1) << t;
  const Stats s = cache->stats();
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.hits_memory + s.hits_disk + s.compiles, 8u);
}

}  // namespace
}  // namespace kjit::cache
