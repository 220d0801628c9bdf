// libkjit_client across a kjitd restart (remote.h): the session, the ring and the registrations do
// not survive it, so the next launch opens a new session and a new ring; while the daemon is away a
// launch is UNAVAILABLE within the deadline, never a hang. Without a GPU a launch stops at the
// device (FAILED_PRECONDITION) after that resynchronization; tests/gpu/e2e_restart.sh runs real
// launches across a restart.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "client/cpp/include/kjit_client.h"
#include "client/cpp/include/kjit_client.hpp"
#include "tests/e2e/client_args.h"
#include "tests/e2e/daemon_process.h"

namespace {

using Clock = std::chrono::steady_clock;

// remote.cc names this process's launch rings /kjit-ring-<pid>-<n>.
std::string RingPrefix() { return "kjit-ring-" + std::to_string(getpid()) + "-"; }

// The rings this process has mapped (/proc/self/maps: their objects are unlinked as soon as kjitd
// has mapped them, so the lines end in "(deleted)").
std::set<std::string> MyRings() {
  std::set<std::string> out;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find("/dev/shm/" + RingPrefix());
    if (at == std::string::npos) continue;
    std::string name = line.substr(at + 9);
    name = name.substr(0, name.find(' '));
    out.insert(name);
  }
  return out;
}

// This process's ring objects still in /dev/shm: none once a ring is open (a client killed with
// SIGKILL leaves nothing behind).
std::set<std::string> MyRingObjects() {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename();
    if (name.rfind(RingPrefix(), 0) == 0) out.insert(name);
  }
  return out;
}

using kjit::testing::ValidArgs;

// A ring client of `target` (which must outlive the options), with a 2 s deadline.
kjit_client_options RingOptions(const std::string& target) {
  kjit_client_options o{};
  o.struct_size = sizeof(o);
  o.target = target.c_str();
  o.modes = "ring";
  o.deadline_ms = 2000;
  o.client_name = "client_restart_test";
  return o;
}

TEST(ClientRestart, RingClientOpensANewSessionAndRingAfterKjitdRestarts) {
  if (access("/proc/driver/nvidia/version", F_OK) == 0) GTEST_SKIP() << "a GPU machine: e2e_restart.sh covers it";
  kjit::testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.ok()) << daemon.error();
  const std::string target = daemon.target();
  const kjit_client_options o = RingOptions(target);
  kjit_client* c = nullptr;
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  const std::set<std::string> before = MyRings();
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(MyRingObjects().size(), 0u) << "the ring's object is still in /dev/shm";
  const kjit_mla_verify_args a = ValidArgs();
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_FAILED_PRECONDITION) << kjit_last_error();  // no GPU here

  ASSERT_EQ(kill(daemon.pid(), SIGKILL), 0);
  // The session's stream sees the daemon go within moments; until it has, a launch stops at the
  // device check (no GPU here) without any RPC. Then: UNAVAILABLE within the deadline.
  int rc = KJIT_FAILED_PRECONDITION;
  auto t0 = Clock::now();
  for (const auto until = Clock::now() + std::chrono::seconds(10); Clock::now() < until;) {
    t0 = Clock::now();
    rc = kjit_mla_verify(c, &a, 0, nullptr);
    if (rc != KJIT_FAILED_PRECONDITION) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(rc, KJIT_UNAVAILABLE) << kjit_last_error();
  EXPECT_NE(std::string(kjit_last_error()).find("session ended"), std::string::npos) << kjit_last_error();
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(4000));

  ASSERT_TRUE(daemon.KillAndRestart()) << daemon.error();
  t0 = Clock::now();
  // The old ring is gone with the old daemon: a new session, a new ring, then the device check.
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_FAILED_PRECONDITION) << kjit_last_error();
  EXPECT_EQ(std::string(kjit_last_error()).find("launch ring"), std::string::npos) << kjit_last_error();
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(4000));
  const std::set<std::string> after = MyRings();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(*after.begin(), *before.begin()) << "the ring was not opened again";
  EXPECT_EQ(MyRingObjects().size(), 0u);
  // A second launch finds everything in place: the same ring.
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_FAILED_PRECONDITION) << kjit_last_error();
  EXPECT_EQ(MyRings(), after);
  kjit_client_destroy(c);
  EXPECT_TRUE(MyRings().empty());
  EXPECT_EQ(daemon.Stop(), 0);
}

// After a restart the ring client cannot open a new ring (another client holds the one kjitd
// serves, --max-rings 1): each launch says so, and leaves no region behind. With room for two
// regions (the other ring's and one more), a ring region left registered by the first refusal
// would make the second fail on --max-regions instead.
TEST(ClientRestart, ARingThatCannotBeOpenedAgainLeavesNoRegionBehind) {
  if (access("/proc/driver/nvidia/version", F_OK) == 0) GTEST_SKIP() << "a GPU machine: the launch would run";
  kjit::testing::DaemonProcess daemon({"--max-rings", "1", "--max-regions", "2"});
  ASSERT_TRUE(daemon.ok()) << daemon.error();
  const std::string target = daemon.target();
  const kjit_client_options o = RingOptions(target);
  kjit_client* c = nullptr;
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  ASSERT_TRUE(daemon.KillAndRestart()) << daemon.error();
  kjit_client* other = nullptr;  // takes the new daemon's only ring
  ASSERT_EQ(kjit_client_create(&o, &other), KJIT_OK) << kjit_last_error();
  const kjit_mla_verify_args a = ValidArgs();
  // Until the old session's end is seen, a launch stops at the device check (no GPU here) without
  // any RPC, or is UNAVAILABLE; then the new session's Resync tries to open a ring.
  int rc = KJIT_UNAVAILABLE;
  for (const auto until = Clock::now() + std::chrono::seconds(10);
       (rc == KJIT_UNAVAILABLE || rc == KJIT_FAILED_PRECONDITION) && Clock::now() < until;) {
    rc = kjit_mla_verify(c, &a, 0, nullptr);
    if (rc == KJIT_UNAVAILABLE || rc == KJIT_FAILED_PRECONDITION) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < 3; ++i) {
    if (i > 0) rc = kjit_mla_verify(c, &a, 0, nullptr);
    const std::string why = kjit_last_error();
    EXPECT_EQ(rc, KJIT_RESOURCE_EXHAUSTED) << i << ": " << why;
    EXPECT_NE(why.find("--max-rings"), std::string::npos) << i << ": " << why;
    EXPECT_EQ(why.find("--max-regions"), std::string::npos) << i << ": " << why;
  }
  kjit_client_destroy(other);  // its ring is free again: the next launch opens one
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_FAILED_PRECONDITION) << kjit_last_error();  // no GPU here
  kjit_client_destroy(c);
  EXPECT_EQ(daemon.Stop(), 0);
}

}  // namespace
