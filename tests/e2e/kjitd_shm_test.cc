// Shared memory registration, sessions and kjit.v1.KernelService against a real (compile-only)
// kjitd: real POSIX shared memory, and the exact status code of every error path.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <thread>

#include "inference/grpc_service.grpc.pb.h"
#include "kjit/v1/kernel_service.grpc.pb.h"
#include "tests/e2e/daemon_fixture.h"

namespace kjit::testing {
namespace {

using grpc::StatusCode;

class ShmTest : public ShmDaemonSuite {
 protected:
  StatusCode Status(const std::string& name, inference::SystemSharedMemoryStatusResponse* resp,
                    const std::string& session = "") {
    grpc::ClientContext ctx;
    if (!session.empty()) ctx.AddMetadata("kjit-session", session);
    inference::SystemSharedMemoryStatusRequest req;
    req.set_name(name);
    return stub_->SystemSharedMemoryStatus(&ctx, req, resp).error_code();
  }
  // The regions a request of `session` sees.
  size_t RegionCount(const std::string& session = "") {
    inference::SystemSharedMemoryStatusResponse resp;
    EXPECT_EQ(Status("", &resp, session), StatusCode::OK);
    return resp.regions_size();
  }
};

TEST_F(ShmTest, RegisterStatusUnregister) {
  ASSERT_EQ(Register("in", key(), 128, 1024), StatusCode::OK);
  inference::SystemSharedMemoryStatusResponse st;
  ASSERT_EQ(Status("in", &st), StatusCode::OK);
  ASSERT_EQ(st.regions().count("in"), 1u);
  const auto& r = st.regions().at("in");
  EXPECT_EQ(r.name(), "in");
  EXPECT_EQ(r.key(), key());
  EXPECT_EQ(r.offset(), 128u);
  EXPECT_EQ(r.byte_size(), 1024u);
  EXPECT_EQ(Unregister("in"), StatusCode::OK);
  EXPECT_EQ(Status("in", &st), StatusCode::NOT_FOUND);
  EXPECT_EQ(RegionCount(), 0u);
}

TEST_F(ShmTest, ErrorCodes) {
  ASSERT_EQ(Register("a", key(), 0, 4096), StatusCode::OK);
  EXPECT_EQ(Register("a", key(), 0, 16), StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Register("b", key() + "-missing", 0, 16), StatusCode::NOT_FOUND);
  EXPECT_EQ(Register("b", key(), 4096, 1), StatusCode::INVALID_ARGUMENT);   // starts at the end
  EXPECT_EQ(Register("b", key(), 4000, 97), StatusCode::INVALID_ARGUMENT);  // one byte past
  EXPECT_EQ(Register("b", key(), std::numeric_limits<uint64_t>::max() - 8, 64),
            StatusCode::INVALID_ARGUMENT);  // offset + size overflows
  EXPECT_EQ(Register("b", key(), 64, std::numeric_limits<uint64_t>::max()), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("b", key(), 0, 0), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("", key(), 0, 16), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("b", "", 0, 16), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("b", key(), 4000, 96), StatusCode::OK);  // exactly to the end
  inference::SystemSharedMemoryStatusResponse st;
  EXPECT_EQ(Status("nope", &st), StatusCode::NOT_FOUND);
  EXPECT_EQ(Unregister("nope"), StatusCode::OK);
  EXPECT_EQ(RegionCount(), 2u);
  EXPECT_EQ(Unregister(""), StatusCode::OK);  // perf_analyzer's start-up unregister
  EXPECT_EQ(RegionCount(), 0u);
}

TEST_F(ShmTest, CudaRegionsWithoutGpu) {
  grpc::ClientContext c1, c2, c3, c4, c5;
  inference::CudaSharedMemoryRegisterRequest req;
  req.set_name("gpu");
  req.set_raw_handle(std::string(10, '\1'));
  req.set_device_id(0);
  req.set_byte_size(256);
  inference::CudaSharedMemoryRegisterResponse resp;
  EXPECT_EQ(stub_->CudaSharedMemoryRegister(&c1, req, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  req.set_raw_handle(std::string(65, '\1'));
  EXPECT_EQ(stub_->CudaSharedMemoryRegister(&c2, req, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  req.set_raw_handle(std::string(64, '\1'));
  const grpc::Status s = stub_->CudaSharedMemoryRegister(&c3, req, &resp);
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("compile-only"), std::string::npos) << s.error_message();
  inference::CudaSharedMemoryStatusResponse st;
  ASSERT_TRUE(stub_->CudaSharedMemoryStatus(&c4, {}, &st).ok());
  EXPECT_EQ(st.regions_size(), 0);
  inference::CudaSharedMemoryUnregisterRequest ureq;
  ureq.set_name("never-registered");
  inference::CudaSharedMemoryUnregisterResponse uresp;
  EXPECT_TRUE(stub_->CudaSharedMemoryUnregister(&c5, ureq, &uresp).ok());
}

TEST_F(ShmTest, CudaRegisterChecksBeforeTheGpu) {
  // Handle length, byte size and name are the client's errors even on a compile-only daemon.
  auto reg = [&](const std::string& name, size_t handle_bytes, uint64_t size) {
    grpc::ClientContext ctx;
    inference::CudaSharedMemoryRegisterRequest req;
    req.set_name(name);
    req.set_raw_handle(std::string(handle_bytes, '\1'));
    req.set_device_id(0);
    req.set_byte_size(size);
    inference::CudaSharedMemoryRegisterResponse resp;
    return stub_->CudaSharedMemoryRegister(&ctx, req, &resp);
  };
  EXPECT_EQ(reg("gpu", 64, 0).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(reg("", 64, 256).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(reg("gpu", 0, 256).error_code(), StatusCode::INVALID_ARGUMENT);
  const grpc::Status s = reg("gpu", 63, 256);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("64"), std::string::npos) << s.error_message();
  grpc::ClientContext c1, c2;
  inference::CudaSharedMemoryStatusRequest sreq;
  sreq.set_name("gpu");
  inference::CudaSharedMemoryStatusResponse st;
  EXPECT_EQ(stub_->CudaSharedMemoryStatus(&c1, sreq, &st).error_code(), StatusCode::NOT_FOUND);
  inference::CudaSharedMemoryUnregisterResponse uresp;
  EXPECT_TRUE(stub_->CudaSharedMemoryUnregister(&c2, {}, &uresp).ok());  // empty name: all
}

TEST_F(ShmTest, SystemAndCudaShareOneNameSpace) {
  ASSERT_EQ(Register("shared", key(), 0, 64), StatusCode::OK);
  // A CUDA unregister of a system region's name leaves it alone.
  grpc::ClientContext ctx;
  inference::CudaSharedMemoryUnregisterRequest ureq;
  ureq.set_name("shared");
  inference::CudaSharedMemoryUnregisterResponse uresp;
  EXPECT_TRUE(stub_->CudaSharedMemoryUnregister(&ctx, ureq, &uresp).ok());
  EXPECT_EQ(RegionCount(), 1u);
}

TEST_F(ShmTest, SessionEndReleasesItsRegionsOnly) {
  grpc::ClientContext sctx;
  auto stream = kernels_->OpenSession(&sctx);
  kjit::v1::SessionEvent hello;
  ASSERT_TRUE(stream->Read(&hello));
  ASSERT_FALSE(hello.session_id().empty());
  kjit::v1::SessionRequest name;
  name.set_client_name("shm test");
  ASSERT_TRUE(stream->Write(name));
  ASSERT_EQ(Register("mine", key(), 0, 64, hello.session_id()), StatusCode::OK);
  ASSERT_EQ(Register("global", key(), 64, 64), StatusCode::OK);
  EXPECT_EQ(Register("x", key(), 0, 64, "no-such-session"), StatusCode::NOT_FOUND);
  EXPECT_EQ(RegionCount(hello.session_id()), 2u);
  EXPECT_EQ(RegionCount(), 1u);  // a session's regions are its own
  inference::SystemSharedMemoryStatusResponse st;
  EXPECT_EQ(Status("mine", &st), StatusCode::NOT_FOUND);
  EXPECT_EQ(Register("mine", key(), 0, 64), StatusCode::ALREADY_EXISTS);  // one name space per user
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  StatusCode again = StatusCode::ALREADY_EXISTS;
  while ((again = Register("mine", key(), 0, 64)) == StatusCode::ALREADY_EXISTS &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(again, StatusCode::OK);  // released with the session: the name is free
  EXPECT_EQ(Status("global", &st), StatusCode::OK);
  EXPECT_EQ(Register("y", key(), 0, 64, hello.session_id()), StatusCode::NOT_FOUND);  // ended
}

TEST_F(ShmTest, KernelServiceEventsAndCache) {
  grpc::ClientContext c1, c2, c3, c4, c5, c6, c7;
  kjit::v1::RegisterEventRequest ev;
  ev.set_name("ev");
  ev.set_raw_handle(std::string(63, '\0'));
  kjit::v1::RegisterEventResponse evr;
  EXPECT_EQ(kernels_->RegisterEvent(&c1, ev, &evr).error_code(), StatusCode::INVALID_ARGUMENT);
  ev.set_raw_handle(std::string(64, '\0'));
  EXPECT_EQ(kernels_->RegisterEvent(&c2, ev, &evr).error_code(), StatusCode::FAILED_PRECONDITION);
  kjit::v1::UnregisterEventRequest uev;
  uev.set_name("never");
  kjit::v1::UnregisterEventResponse uevr;
  EXPECT_TRUE(kernels_->UnregisterEvent(&c3, uev, &uevr).ok());
  kjit::v1::CacheStatsResponse stats;
  ASSERT_TRUE(kernels_->CacheStats(&c4, {}, &stats).ok());
  EXPECT_EQ(stats.directory(), daemon_->dir() + "/cache");
  EXPECT_EQ(stats.write_failures(), 0u);
  kjit::v1::CacheListResponse list;
  ASSERT_TRUE(kernels_->CacheList(&c5, {}, &list).ok());
  EXPECT_EQ(list.entries_size(), 0);  // nothing compiled: no --arch and no GPU
  kjit::v1::GetKernelRequest gk;
  gk.set_family("no_such_family");
  gk.set_arch("sm_90");
  kjit::v1::GetKernelResponse gkr;
  EXPECT_EQ(kernels_->GetKernel(&c6, gk, &gkr).error_code(), StatusCode::INVALID_ARGUMENT);
  kjit::v1::ListKernelsRequest lk;
  lk.set_family("no_such_family");
  kjit::v1::ListKernelsResponse lkr;
  EXPECT_EQ(kernels_->ListKernels(&c7, lk, &lkr).error_code(), StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace kjit::testing
