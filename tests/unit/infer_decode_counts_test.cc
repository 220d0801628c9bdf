// The ModelInfer decoder against requests of more tensors than the model's schema: refused at once,
// naming the repeated or unknown tensor, in time linear in the request (each output's shape scans
// the inputs, so decoding 40k inputs and 40k outputs took seconds); typed contents whose count does
// not fit the shape, refused before they are copied.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
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

// kv_indices (INT64 [3]) as typed contents instead of its raw slot.
Req WithTypedIndices(int values) {
  Req r = ValidRequest();
  r.mutable_raw_input_contents()->DeleteSubrange(5, 1);
  for (int i = 0; i < values; ++i) r.mutable_inputs(5)->mutable_contents()->add_int64_contents(i + 1);
  return r;
}

TEST(InferDecodeCounts, TypedContentsMustFitTheShapeBeforeTheyAreCopied) {
  DecodedInfer out;
  ASSERT_TRUE(DecodeInferRequest(WithTypedIndices(3), &out).ok());
  const auto& t = out.request.inputs[5];
  ASSERT_EQ(t.desc.byte_size, 24u);
  int64_t v[3];
  std::memcpy(v, t.host, sizeof(v));
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[2], 3);
  // A million zeros take about a megabyte on the wire and eight in a copy: refused, none made.
  for (const int n : {2, 4, 1000000}) {
    const Req r = WithTypedIndices(n);
    DecodedInfer bad;
    const auto t0 = Clock::now();
    const Status s = DecodeInferRequest(r, &bad);
    const Clock::duration took = Clock::now() - t0;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_NE(std::string(s.message()).find(absl::StrCat("tensor 'kv_indices': ", n,
                                                         " typed contents values for shape [3] of datatype INT64")),
              std::string::npos)
        << s;
    EXPECT_TRUE(bad.owned.empty()) << "a copy was made of contents that do not fit";
    EXPECT_LT(took, std::chrono::seconds(1));
  }
  Req huge = WithTypedIndices(1);  // a shape whose element count overflows: no count fits it
  huge.mutable_inputs(5)->clear_shape();
  for (int i = 0; i < 4; ++i) huge.mutable_inputs(5)->add_shape(int64_t{1} << 20);
  DecodedInfer bad;
  EXPECT_EQ(DecodeInferRequest(huge, &bad).code(), absl::StatusCode::kInvalidArgument);
  Req ranked = WithTypedIndices(2);  // a shape of rank 100000 (one element): the message shows its first dimensions
  ranked.mutable_inputs(5)->clear_shape();
  for (int i = 0; i < 100000; ++i) ranked.mutable_inputs(5)->add_shape(1);
  DecodedInfer bad_rank;
  const Status s = DecodeInferRequest(ranked, &bad_rank);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_LT(s.message().size(), 300u) << s.message().substr(0, 300);
}

TEST(InferDecodeCounts, TypedContentsInAnotherFieldOrPastTheirDatatypeAreRefused) {
  // INT64 values sent in int_contents: said so, not "0 typed contents values".
  Req r = WithTypedIndices(0);
  for (int i = 0; i < 3; ++i) r.mutable_inputs(5)->mutable_contents()->add_int_contents(i);
  DecodedInfer out;
  Status s = DecodeInferRequest(r, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("datatype INT64 travels in contents.int64_contents"), std::string::npos)
      << s;
  // UINT8 travels in uint_contents, 32 bits a value: 300 was stored as 44.
  for (const uint32_t bad : {256u, 300u, 0xffffffffu}) {
    r = WithTypedIndices(0);
    r.mutable_inputs(5)->set_datatype("UINT8");
    for (const uint32_t v : {7u, bad, 255u}) r.mutable_inputs(5)->mutable_contents()->add_uint_contents(v);
    DecodedInfer refused;
    s = DecodeInferRequest(r, &refused);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(absl::StrCat("value ", bad, " at element 1 does not fit UINT8")),
              std::string::npos)
        << s;
  }
  r = WithTypedIndices(0);
  r.mutable_inputs(5)->set_datatype("UINT8");
  for (const uint32_t v : {0u, 128u, 255u}) r.mutable_inputs(5)->mutable_contents()->add_uint_contents(v);
  DecodedInfer fits;
  ASSERT_TRUE(DecodeInferRequest(r, &fits).ok());
  ASSERT_EQ(fits.request.inputs[5].desc.byte_size, 3u);
  EXPECT_EQ(std::memcmp(fits.request.inputs[5].host, "\x00\x80\xff", 3), 0);
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
