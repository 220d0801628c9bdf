// libkjit_client's C ABI against a real kjitd on a temporary socket (compile-only on a machine
// without a GPU): mode selection, kernels fetched or compiled without a GPU, every error path with
// its code, and a stuck or dead daemon answered within the deadline.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "client/cpp/include/kjit_client.h"
#include "client/cpp/include/kjit_client.hpp"
#include "tests/e2e/client_args.h"
#include "tests/e2e/daemon_process.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using kjit::testing::ValidArgs;

kjit_client_options Options(const std::string& target, const char* modes, int64_t deadline_ms = 5000) {
  kjit_client_options o{};
  o.struct_size = sizeof(o);
  o.target = target.c_str();
  o.modes = modes;
  o.deadline_ms = deadline_ms;
  o.client_name = "client_abi_test";
  return o;
}


bool HasDriver() { return access("/proc/driver/nvidia/version", F_OK) == 0; }

class ClientAbiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.ok()) << daemon_.error(); }
  kjit::testing::DaemonProcess daemon_;
  const std::string target_ = daemon_.target();  // kjit_client_options points into it
};

// The daemon's cache is empty: every GetKernel compiles, and one compile (about 0.6 s on an idle
// machine, several seconds on a loaded one) outlasts the 250 ms deadline, which is kept for the
// calls while kjitd answers ServerLive; the kernels come once compiled.
TEST_F(ClientAbiTest, InProcessAgainstTheDaemonFetchesKernelsWithoutAGpu) {
  const kjit_client_options o = Options(target_, "in-process,remote", 250);
  kjit_client* c = nullptr;
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  EXPECT_EQ(kjit_client_mode(c), KJIT_MODE_IN_PROCESS);
  EXPECT_NE(std::string(kjit_client_describe(c)).find(target_), std::string::npos) << kjit_client_describe(c);
  EXPECT_EQ(kjit_client_prepare(c, "sm_120"), KJIT_OK) << kjit_last_error();  // GetKernel, compiled on demand
  EXPECT_STREQ(kjit_last_error(), "");
  EXPECT_EQ(kjit_client_prepare(c, "sm_120"), KJIT_OK) << kjit_last_error();  // fetched once per arch
  EXPECT_EQ(kjit_client_prepare(c, "sm_7"), KJIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kjit_last_error()).find("sm_7"), std::string::npos) << kjit_last_error();
  kjit_client_destroy(c);
}

// "Forever" as a deadline: cut to 30 days, not wrapped into the past (every RPC would fail at once
// and the client fall back to another mode).
TEST_F(ClientAbiTest, AnInt64MaxDeadlineIsTakenAsALongOne) {
  const kjit_client_options o = Options(target_, "in-process", INT64_MAX);
  kjit_client* c = nullptr;
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  EXPECT_EQ(kjit_client_mode(c), KJIT_MODE_IN_PROCESS);
  EXPECT_EQ(kjit_client_prepare(c, "sm_7"), KJIT_INVALID_ARGUMENT) << kjit_last_error();  // answered, not timed out
  kjit_client_destroy(c);
}

TEST_F(ClientAbiTest, BadOptionsAndArgumentsAreInvalidArgument) {
  kjit_client* c = reinterpret_cast<kjit_client*>(0x1);
  kjit_client_options o = Options(target_, "in-process,warp");
  EXPECT_EQ(kjit_client_create(&o, &c), KJIT_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(kjit_last_error()).find("'warp'"), std::string::npos) << kjit_last_error();
  o = Options(target_, "in-process");
  o.struct_size = 8;
  EXPECT_EQ(kjit_client_create(&o, &c), KJIT_INVALID_ARGUMENT);
  EXPECT_EQ(kjit_client_create(&o, nullptr), KJIT_INVALID_ARGUMENT);
  // A caller built before token_file passes the size up to it (the token then comes from the
  // environment) and still gets a client.
  o = Options(target_, "in-process");
  o.struct_size = offsetof(kjit_client_options, token_file);
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  kjit_client_destroy(c);
  o = Options(target_, "in-process");
  o.token_file = "/nonexistent/kjit-token";
  EXPECT_EQ(kjit_client_create(&o, &c), KJIT_FAILED_PRECONDITION);
  EXPECT_NE(std::string(kjit_last_error()).find("/nonexistent/kjit-token"), std::string::npos) << kjit_last_error();

  o = Options(target_, "in-process");
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  EXPECT_EQ(kjit_mla_verify(c, nullptr, 0, nullptr), KJIT_INVALID_ARGUMENT);
  kjit_mla_verify_args a = ValidArgs();
  a.struct_size = 16;
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kjit_last_error()).find("struct_size"), std::string::npos);
  // The family's checks run before any device is touched, naming the tensor to fix.
  a = ValidArgs();
  a.q.shape[2] = 512;
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kjit_last_error()).find("'q'"), std::string::npos) << kjit_last_error();
  a = ValidArgs();
  a.q.shape[1] = a.o.shape[1] = 12;  // a head count kjit has no kernel for
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kjit_last_error()).find("num_heads"), std::string::npos) << kjit_last_error();
  a = ValidArgs();
  a.custom_mask.dtype = 77;
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
  a = ValidArgs();
  a.q.strides[2] = 2;  // the last dimension must be dense
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kjit_last_error()).find("stride"), std::string::npos) << kjit_last_error();
  a = ValidArgs();
  a.max_draft = 65;
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kjit_last_error()).find("kjit_max_draft"), std::string::npos) << kjit_last_error();
  if (!HasDriver()) {  // valid shapes: only the missing GPU stops it
    a = ValidArgs();
    EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_FAILED_PRECONDITION) << kjit_last_error();
    EXPECT_EQ(kjit_check_errors(c, 0, 0), KJIT_FAILED_PRECONDITION) << kjit_last_error();
  }
  EXPECT_EQ(kjit_check_errors(nullptr, 0, 0), KJIT_INVALID_ARGUMENT);
  kjit_client_destroy(c);
}

// Callers built before fp8_numerics pass the struct up to it: accepted, and nothing past it is read
// (the bytes there would be an invalid fp8_numerics). Any other size is refused, naming both.
TEST_F(ClientAbiTest, ArgsOfCallersBuiltBeforeFp8Numerics) {
  const kjit_client_options o = Options(target_, "in-process");
  kjit_client* c = nullptr;
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  constexpr size_t kOldSize = offsetof(kjit_mla_verify_args, fp8_numerics);
  alignas(kjit_mla_verify_args) unsigned char bytes[sizeof(kjit_mla_verify_args)];
  for (int64_t kv_dtype : {int64_t{KJIT_DTYPE_BF16}, int64_t{KJIT_DTYPE_FP8_E4M3}}) {
    kjit_mla_verify_args a = ValidArgs();
    a.kv_cache.dtype = kv_dtype;
    a.struct_size = kOldSize;
    std::memset(bytes, 0x7f, sizeof(bytes));
    std::memcpy(bytes, &a, kOldSize);
    const auto* old = reinterpret_cast<const kjit_mla_verify_args*>(bytes);
    if (!HasDriver()) {  // valid: only the missing GPU stops it
      EXPECT_EQ(kjit_mla_verify(c, old, 0, nullptr), KJIT_FAILED_PRECONDITION) << kjit_last_error();
    }
    a.q.shape[2] = 512;  // and the family's checks still run on it
    std::memcpy(bytes, &a, kOldSize);
    EXPECT_EQ(kjit_mla_verify(c, old, 0, nullptr), KJIT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("'q'"), std::string::npos) << kjit_last_error();
  }
  kjit_mla_verify_args a = ValidArgs();
  a.struct_size = kOldSize + 4;
  EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
  const std::string why = kjit_last_error();
  EXPECT_NE(why.find("struct_size is " + std::to_string(kOldSize + 4)), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(sizeof(kjit_mla_verify_args))), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(kOldSize)), std::string::npos) << why;
  kjit_client_destroy(c);
}

// An fp8 e4m3 cache (KJIT_DTYPE_FP8_E4M3, or its bytes as KJIT_DTYPE_UINT8) passes every mode's
// checks with either numerics; fp8 elsewhere, fp8 numerics with a bf16 cache and an unknown
// numerics value are INVALID_ARGUMENT before any device is touched.
TEST_F(ClientAbiTest, Fp8CacheInEveryMode) {
  for (const char* modes : {"in-process", "ring", "remote"}) {
    SCOPED_TRACE(modes);
    const kjit_client_options o = Options(target_, modes);
    kjit_client* c = nullptr;
    ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
    if (!HasDriver()) {
      for (int64_t kv_dtype : {int64_t{KJIT_DTYPE_FP8_E4M3}, int64_t{KJIT_DTYPE_UINT8}}) {
        for (int64_t numerics : {int64_t{KJIT_FP8_NUMERICS_DEQUANT}, int64_t{KJIT_FP8_NUMERICS_FP8}}) {
          kjit_mla_verify_args a = ValidArgs();
          a.kv_cache.dtype = kv_dtype;
          a.fp8_numerics = numerics;
          a.k_scale = 0.5;
          a.v_scale = 2.0;
          EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_FAILED_PRECONDITION)
              << kv_dtype << "/" << numerics << ": " << kjit_last_error();
        }
      }
    }
    kjit_mla_verify_args a = ValidArgs();
    a.kv_cache.dtype = KJIT_DTYPE_FP8_E4M3;
    a.kv_cache.shape[2] = 512;  // the checks are the family's, for the fp8 cache too
    EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("'kv_cache'"), std::string::npos) << kjit_last_error();
    a = ValidArgs();
    a.k_extend.dtype = KJIT_DTYPE_FP8_E4M3;
    EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("'k_extend'"), std::string::npos) << kjit_last_error();
    a = ValidArgs();
    a.fp8_numerics = KJIT_FP8_NUMERICS_FP8;
    EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("bf16 kv_cache"), std::string::npos) << kjit_last_error();
    a = ValidArgs();
    a.kv_cache.dtype = KJIT_DTYPE_UINT8;
    a.fp8_numerics = 3;
    EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("fp8_numerics is 3"), std::string::npos) << kjit_last_error();
    kjit_client_destroy(c);
  }
}

TEST_F(ClientAbiTest, RingAndRemoteModesOpenAgainstTheDaemon) {
  for (const char* modes : {"ring", "remote"}) {
    kjit_client_options o = Options(target_, modes);
    o.flags = KJIT_MODE_FLAG_EVENTS;
    kjit_client* c = nullptr;
    ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << modes << ": " << kjit_last_error();
    EXPECT_EQ(kjit_client_mode(c), std::string(modes) == "ring" ? KJIT_MODE_RING : KJIT_MODE_REMOTE);
    EXPECT_NE(std::string(kjit_client_describe(c)).find("IPC events"), std::string::npos);
    EXPECT_EQ(kjit_client_prepare(c, "sm_90"), KJIT_OK);  // the daemon holds the kernels: nothing to do
    if (!HasDriver()) {
      const kjit_mla_verify_args a = ValidArgs();
      EXPECT_EQ(kjit_mla_verify(c, &a, 0, nullptr), KJIT_FAILED_PRECONDITION) << kjit_last_error();
    }
    kjit_client_destroy(c);
  }
}

// Several clients of one process share the daemon's name space: their rings and regions must not
// collide (nor one client's cleanup remove another's).
TEST_F(ClientAbiTest, TwoRingClientsInOneProcess) {
  kjit_client_options o = Options(target_, "ring");
  kjit_client *a = nullptr, *b = nullptr;
  ASSERT_EQ(kjit_client_create(&o, &a), KJIT_OK) << kjit_last_error();
  o.flags = KJIT_MODE_FLAG_EVENTS;
  ASSERT_EQ(kjit_client_create(&o, &b), KJIT_OK) << kjit_last_error();
  kjit_client_destroy(b);
  kjit_client* c = nullptr;
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();  // after b's cleanup, a third
  kjit_client_destroy(c);
  kjit_client_destroy(a);
}

TEST(ClientAbi, NoDaemonFallsBackToEmbeddedWhichCompilesIntoTheCache) {
  const std::string dir = ::testing::TempDir() + "/kjit_client_embedded_" + std::to_string(getpid());
  fs::remove_all(dir);
  const std::string nowhere = "unix://" + dir + "/no.sock";
  kjit_client_options o = Options(nowhere, "in-process,embedded", 500);
  o.cache_dir = dir.c_str();
  kjit_client* c = nullptr;
  const auto t0 = Clock::now();
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(kjit_client_mode(c), KJIT_MODE_EMBEDDED);
  const std::string why = kjit_client_describe(c);
  EXPECT_NE(why.find("embedded"), std::string::npos);
  EXPECT_NE(why.find("not in-process"), std::string::npos) << why;  // and why not
  ASSERT_EQ(kjit_client_prepare(c, "sm_120"), KJIT_OK) << kjit_last_error();
  int entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) entries += e.path().extension() == ".cubin";
  EXPECT_EQ(entries, 20) << "one entry per mla_verify specialization (H x mask x bf16 or fp8 cache)";
  kjit_client_destroy(c);
  fs::remove_all(dir);

  o = Options(nowhere, "in-process,ring,remote", 500);
  const auto t1 = Clock::now();
  EXPECT_EQ(kjit_client_create(&o, &c), KJIT_FAILED_PRECONDITION);
  EXPECT_LT(Clock::now() - t1, std::chrono::seconds(5));
  EXPECT_NE(std::string(kjit_last_error()).find("in-process ("), std::string::npos) << kjit_last_error();
}

// A stuck daemon (stopped) and a dead one (killed): the call fails within the deadline (prepare:
// within two, GetKernel's and then ServerLive's, since a GetKernel past its deadline may be a
// compile that kjitd is still running).
TEST(ClientAbi, StuckOrDeadDaemonIsAnErrorWithinTheDeadline) {
  kjit::testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.ok()) << daemon.error();
  const std::string target = daemon.target();
  const kjit_client_options o = Options(target, "in-process", 1500);
  kjit_client* c = nullptr;
  ASSERT_EQ(kjit_client_create(&o, &c), KJIT_OK) << kjit_last_error();
  ASSERT_EQ(kill(daemon.pid(), SIGSTOP), 0);
  auto t0 = Clock::now();
  EXPECT_EQ(kjit_client_prepare(c, "sm_90"), KJIT_DEADLINE_EXCEEDED) << kjit_last_error();
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2 * 1500 + 1500));
  EXPECT_NE(std::string(kjit_last_error()).find("ServerLive"), std::string::npos) << kjit_last_error();
  ASSERT_EQ(kill(daemon.pid(), SIGCONT), 0);
  ASSERT_EQ(kill(daemon.pid(), SIGKILL), 0);  // reaped by the fixture
  t0 = Clock::now();
  const int code = kjit_client_prepare(c, "sm_86");
  EXPECT_TRUE(code == KJIT_UNAVAILABLE || code == KJIT_DEADLINE_EXCEEDED) << code << " " << kjit_last_error();
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(4000));
  kjit_client_destroy(c);  // its session stream is gone too: no hang here either
}

TEST(ClientAbi, VersionAndCppWrapper) {
  EXPECT_EQ(kjit_abi_version(), KJIT_CLIENT_ABI_VERSION);
  EXPECT_STRNE(kjit_version(), "");
  try {
    const std::string nowhere = "unix:///nonexistent/kjit.sock";
    const kjit_client_options o = Options(nowhere, "remote", 300);
    kjit::Client c = kjit::Client::Create(&o);
    ADD_FAILURE() << "created without a daemon";
  } catch (const kjit::Error& e) {
    EXPECT_EQ(e.code(), KJIT_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("remote"), std::string::npos) << e.what();
  }
}

}  // namespace
