// The ModelInfer decoder against requests of more tensors than the model's schema: refused at once,
// naming the repeated or unknown tensor, in time linear in the request (each output's shape scans
// the inputs, so decoding 40k inputs and 40k outputs took seconds).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "runtime/server/infer_decode.h"
#include "tests/e2e/infer_requests.h"

namespace kjit::server {
namespace {

using Clock = std::chrono::steady_clock;
using kjit::testing::Req;
using kjit::testing::ValidRequest;

constexpr int kMany = 40000;

Status Decode(const Req& r, Clock::duration* took) {
  DecodedInfer out;
  const auto t0 = Clock::now();
  Status s = DecodeInferRequest(r, &out);
  *took = Clock::now() - t0;
  return s;
}

TEST(InferDecodeCounts, ManyRepeatedOutputsAreRefusedAtOnce) {
  Req r = ValidRequest();
  for (int i = 0; i < kMany; ++i) r.add_inputs();  // unnamed, empty
  r.clear_outputs();
  for (int i = 0; i < kMany; ++i) r.add_outputs()->set_name("o");
  Clock::duration took;
  const Status s = Decode(r, &took);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("tensor '': unknown input of model 'mla_verify'"), std::string::npos) << s;
  EXPECT_LT(took, std::chrono::seconds(1));

  r = ValidRequest();
  r.clear_outputs();
  for (int i = 0; i < kMany; ++i) r.add_outputs()->set_name("o");
  const Status o = Decode(r, &took);
  EXPECT_EQ(o.code(), absl::StatusCode::kInvalidArgument) << o;
  EXPECT_NE(std::string(o.message()).find("tensor 'o': output given twice"), std::string::npos) << o;
  EXPECT_LT(took, std::chrono::seconds(1));
}

TEST(InferDecodeCounts, ManyRepeatedInputsNameTheFirstRepeat) {
  Req r = ValidRequest();
  for (int i = 0; i < kMany; ++i) *r.add_inputs() = r.inputs(3);  // qo_indptr again and again
  Clock::duration took;
  const Status s = Decode(r, &took);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("tensor 'qo_indptr': input given twice"), std::string::npos) << s;
  EXPECT_LT(took, std::chrono::seconds(1));
}

TEST(InferDecodeCounts, UnknownOutputNamesAreShownSafely) {
  Req r = ValidRequest();
  r.clear_outputs();
  r.add_outputs()->set_name("o");
  r.add_outputs()->set_name("lse");
  r.add_outputs()->set_name(std::string("\x1b[2J", 4));  // a third: more than the model has
  Clock::duration took;
  const Status s = Decode(r, &took);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(std::string(s.message()).find('\x1b'), std::string::npos) << "raw control bytes in: " << s;
  EXPECT_NE(std::string(s.message()).find("unknown output of model 'mla_verify' (expected o, lse)"), std::string::npos)
      << s;
}

TEST(InferDecodeCounts, AsManyTensorsAsTheSchemaStillDecode) {
  Req r = ValidRequest();
  r.add_outputs()->set_name("lse");  // o and lse: the whole output schema
  DecodedInfer out;
  EXPECT_TRUE(DecodeInferRequest(r, &out).ok());
  EXPECT_EQ(out.request.outputs.size(), 2u);
}

}  // namespace
}  // namespace kjit::server
