// Test fixtures: one compile-only kjitd per test suite (started in SetUpTestSuite, stopped in
// TearDownTestSuite) and a fresh inference stub per test; ShmDaemonSuite adds a 4 KiB POSIX shared
// memory object per test, registers and unregisters system shared memory regions, and has a
// kjit.v1.KernelService stub.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "inference/grpc_service.grpc.pb.h"
#include "kjit/v1/kernel_service.grpc.pb.h"
#include "tests/e2e/daemon_process.h"
#include "tests/unit/shm_object.h"

namespace kjit::testing {

class DaemonSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { daemon_ = new DaemonProcess(); }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(daemon_->ok()) << daemon_->error();
    stub_ = inference::GRPCInferenceService::NewStub(daemon_->Channel());
  }
  static inline DaemonProcess* daemon_ = nullptr;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

class ShmDaemonSuite : public DaemonSuite {
 protected:
  static constexpr int kShmBytes = 4096;
  void SetUp() override {
    DaemonSuite::SetUp();
    if (HasFatalFailure()) return;
    shm_ = std::make_unique<ShmObject>(kShmBytes);
    ASSERT_NE(shm_->map(), nullptr);
    kernels_ = kjit::v1::KernelService::NewStub(daemon_->Channel());
  }
  // Unlinks the object and unregisters every system region (also when SetUp failed part way).
  void TearDown() override {
    shm_.reset();
    if (stub_ == nullptr) return;
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryUnregisterResponse r;
    stub_->SystemSharedMemoryUnregister(&ctx, {}, &r);  // empty name: all
  }
  grpc::StatusCode Register(const std::string& name, const std::string& key, uint64_t offset, uint64_t size,
                            const std::string& session = "") {
    grpc::ClientContext ctx;
    if (!session.empty()) ctx.AddMetadata("kjit-session", session);
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name(name);
    req.set_key(key);
    req.set_offset(offset);
    req.set_byte_size(size);
    inference::SystemSharedMemoryRegisterResponse resp;
    return stub_->SystemSharedMemoryRegister(&ctx, req, &resp).error_code();
  }
  grpc::StatusCode Unregister(const std::string& name) {
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryUnregisterRequest req;
    req.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse resp;
    return stub_->SystemSharedMemoryUnregister(&ctx, req, &resp).error_code();
  }
  const std::string& key() const { return shm_->key(); }
  std::unique_ptr<ShmObject> shm_;  // the test's own writes go through shm_->map()
  std::unique_ptr<kjit::v1::KernelService::Stub> kernels_;
};

}  // namespace kjit::testing
