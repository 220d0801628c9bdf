// Test fixture: one compile-only kjitd per test suite (started in SetUpTestSuite, stopped in
// TearDownTestSuite) and a fresh inference stub per test.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "inference/grpc_service.grpc.pb.h"
#include "tests/e2e/daemon_process.h"

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

}  // namespace kjit::testing
