// InferenceService::InferMayWait: which ModelInfer requests the gRPC threads hand to a thread of
// their own (a synchronous launch with a kjit_wait_event may wait up to --launch-timeout-ms), read
// from the request's bytes however gRPC sliced them.
#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/server/inference_service.h"
#include "runtime/server/request_cache.h"

namespace kjit::server {
namespace {

std::string Request(const char* wait, const char* signal, size_t padding = 0) {
  inference::ModelInferRequest r;
  r.set_model_name("mla_verify");
  if (wait != nullptr) (*r.mutable_parameters())["kjit_wait_event"].set_string_param(wait);
  if (signal != nullptr) (*r.mutable_parameters())["kjit_signal_event"].set_string_param(signal);
  r.add_raw_input_contents(std::string(padding, '\x5a'));
  return r.SerializeAsString();
}

// `bytes` as a ByteBuffer of slices of `piece` bytes (the last one shorter).
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) slices.emplace_back(bytes.substr(at, piece));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(InferMayWait, OnlyASynchronousLaunchWithAWaitEvent) {
  const InferenceService service(nullptr);
  for (size_t piece : {size_t{1} << 20, size_t{7}, size_t{16}, size_t{37}}) {
    SCOPED_TRACE(piece);
    EXPECT_TRUE(service.InferMayWait(Sliced(Request("ready", nullptr), piece)));
    EXPECT_FALSE(service.InferMayWait(Sliced(Request("ready", "done"), piece)));  // asynchronous
    EXPECT_FALSE(service.InferMayWait(Sliced(Request(nullptr, nullptr), piece)));
    EXPECT_FALSE(service.InferMayWait(Sliced(Request(nullptr, "done"), piece)));
    EXPECT_FALSE(service.InferMayWait(Sliced(Request("", nullptr), piece)));  // an empty name waits for nothing
    EXPECT_TRUE(service.InferMayWait(Sliced(Request("ready", "", 4096), piece)));
  }
}

// Tensors inline: the queue's thread answers the request, so that offloaded calls never hold many
// large parses at once.
TEST(InferMayWait, NotForALargeRequest) {
  const InferenceService service(nullptr);
  const std::string fits = Request("ready", nullptr, RequestCache::kKeepBytes - 64);
  ASSERT_LE(fits.size(), RequestCache::kKeepBytes);
  EXPECT_TRUE(service.InferMayWait(Sliced(fits, 1 << 16)));
  const std::string large = Request("ready", nullptr, RequestCache::kKeepBytes);
  ASSERT_GT(large.size(), RequestCache::kKeepBytes);
  EXPECT_FALSE(service.InferMayWait(Sliced(large, 1 << 16)));
}

TEST(InferMayWait, FindsTheNameAcrossEverySeam) {
  const InferenceService service(nullptr);
  const std::string bytes = Request("ready", nullptr, 100);
  // Every split of the request into two slices, the name's bytes included.
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    const grpc::Slice parts[2] = {grpc::Slice(bytes.substr(0, cut)), grpc::Slice(bytes.substr(cut))};
    EXPECT_TRUE(service.InferMayWait(grpc::ByteBuffer(parts, 2))) << "cut at " << cut;
  }
}

TEST(InferMayWait, BytesThatAreNoRequestAreAnsweredInline) {
  const InferenceService service(nullptr);
  const std::string garbage = std::string("\xff\xff\xff\xff") + "kjit_wait_event" + std::string(8, '\xff');
  EXPECT_FALSE(service.InferMayWait(Sliced(garbage, 1 << 20)));
  EXPECT_FALSE(service.InferMayWait(grpc::ByteBuffer()));
}

}  // namespace
}  // namespace kjit::server
