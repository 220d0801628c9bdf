// Lifecycle races against a real compile-only kjitd: unregistering a region, ending the session
// that owns it, and SIGTERM, each while ModelInfer requests that use it are in flight. The daemon
// answers each request with a documented code (the region is read or NOT_FOUND) and never crashes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "kjit/v1/kernel_service.grpc.pb.h"
#include "tests/e2e/daemon_fixture.h"
#include "tests/e2e/infer_requests.h"

namespace kjit::testing {
namespace {

using grpc::StatusCode;

// A ModelInfer whose qo_indptr lives in `region` (written at offset 0 of the test's shm object).
Req RegionRequest(const std::string& region) {
  Req r = ValidRequest();
  UseRegion(&r, 3, region, 0, 8);
  return r;
}

// Runs `threads` clients sending `req` until `stop`; returns every status code seen.
std::set<StatusCode> Hammer(const DaemonProcess& daemon, const Req& req, int threads,
                            const std::atomic<bool>& stop) {
  std::mutex mu;
  std::set<StatusCode> codes;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      auto stub = inference::GRPCInferenceService::NewStub(daemon.Channel());
      while (!stop.load()) {
        const StatusCode c = Infer(stub.get(), req).error_code();
        std::lock_guard<std::mutex> lock(mu);
        codes.insert(c);
      }
    });
  }
  for (auto& th : pool) th.join();
  return codes;
}

class RegionRaceTest : public ShmDaemonSuite {
 protected:
  void SetUp() override {
    ShmDaemonSuite::SetUp();
    if (HasFatalFailure()) return;
    const int32_t qo[2] = {0, 2};
    std::memcpy(shm_->map(), qo, sizeof(qo));
  }
  StatusCode Register(const std::string& name, const std::string& session = "") {
    return ShmDaemonSuite::Register(name, key(), 0, kShmBytes, session);
  }
  bool Live() {
    grpc::ClientContext ctx;
    inference::ServerLiveResponse resp;
    return stub_->ServerLive(&ctx, {}, &resp).ok() && resp.live();
  }
};

TEST_F(RegionRaceTest, UnregisterDuringInfer) {
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    for (int i = 0; i < 300; ++i) {
      EXPECT_EQ(Register("flip"), StatusCode::OK);
      grpc::ClientContext ctx;
      inference::SystemSharedMemoryUnregisterRequest req;
      req.set_name("flip");
      inference::SystemSharedMemoryUnregisterResponse resp;
      EXPECT_TRUE(stub_->SystemSharedMemoryUnregister(&ctx, req, &resp).ok());
    }
    stop = true;
  });
  const auto codes = Hammer(*daemon_, RegionRequest("flip"), 3, stop);
  flipper.join();
  for (StatusCode c : codes) {
    EXPECT_TRUE(c == StatusCode::FAILED_PRECONDITION || c == StatusCode::NOT_FOUND) << c;
  }
  EXPECT_TRUE(codes.count(StatusCode::FAILED_PRECONDITION)) << "never read the region";
  EXPECT_TRUE(Live());
}

TEST_F(RegionRaceTest, SessionEndsDuringInfer) {
  auto kernels = kjit::v1::KernelService::NewStub(daemon_->Channel());
  for (int round = 0; round < 20; ++round) {
    grpc::ClientContext sctx;
    auto stream = kernels->OpenSession(&sctx);
    kjit::v1::SessionEvent hello;
    ASSERT_TRUE(stream->Read(&hello));
    ASSERT_EQ(Register("mine", hello.session_id()), StatusCode::OK);
    std::atomic<bool> stop{false};
    std::thread ender([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      sctx.TryCancel();  // the client dies: the daemon releases its regions
      stop = true;
    });
    const auto codes = Hammer(*daemon_, RegionRequest("mine"), 2, stop);
    ender.join();
    (void)stream->Finish();
    for (StatusCode c : codes) {
      EXPECT_TRUE(c == StatusCode::FAILED_PRECONDITION || c == StatusCode::NOT_FOUND) << c;
    }
    // The release runs when the daemon sees the cancel; from then on the name is unknown.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (Infer(stub_.get(), RegionRequest("mine")).error_code() != StatusCode::NOT_FOUND &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(Infer(stub_.get(), RegionRequest("mine")).error_code(), StatusCode::NOT_FOUND);
  }
  EXPECT_TRUE(Live());
}

TEST_F(RegionRaceTest, ObjectTruncatedAfterRegistration) {
  ASSERT_EQ(Register("shrunk"), StatusCode::OK);
  EXPECT_EQ(Infer(stub_.get(), RegionRequest("shrunk")).error_code(), StatusCode::FAILED_PRECONDITION);
  shm_->Resize(0);  // the client shrinks the object under its registration
  const grpc::Status s = Infer(stub_.get(), RegionRequest("shrunk"));
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("'qo_indptr'"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("truncated"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Live());
}

TEST(DaemonStop, SigtermWithRequestsInFlightExitsZero) {
  DaemonProcess daemon;
  ASSERT_TRUE(daemon.ok()) << daemon.error();
  std::atomic<bool> stop{false};
  std::set<StatusCode> codes;
  std::thread clients([&] { codes = Hammer(daemon, ValidRequest(), 3, stop); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(daemon.Stop(), 0);
  stop = true;
  clients.join();
  for (StatusCode c : codes) {
    EXPECT_TRUE(c == StatusCode::FAILED_PRECONDITION || c == StatusCode::UNAVAILABLE ||
                c == StatusCode::CANCELLED) << c;
  }
  EXPECT_TRUE(codes.count(StatusCode::FAILED_PRECONDITION));
}

}  // namespace
}  // namespace kjit::testing
