// ModelInfer against a real compile-only kjitd: every validation error comes back as its exact code
// before the launch is attempted; a fully valid request gets FAILED_PRECONDITION (no GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "inference/grpc_service.grpc.pb.h"
#include "tests/e2e/daemon_fixture.h"
#include "tests/e2e/infer_requests.h"
#include "tests/unit/shm_object.h"

namespace kjit::testing {
namespace {

using grpc::StatusCode;

class InferTest : public DaemonSuite {
 protected:
  grpc::Status Infer(const Req& r) { return testing::Infer(stub_.get(), r); }
  // Expects INVALID_ARGUMENT whose message names `tensor`.
  void ExpectBad(const Req& r, const std::string& tensor) {
    ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "'" + tensor + "'");
  }
};

TEST_F(InferTest, ValidRequestWithoutGpuIsFailedPrecondition) {
  const grpc::Status s = Infer(ValidRequest());
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("compile-only"), std::string::npos) << s.error_message();
  Req naive = ValidRequest();
  naive.set_model_name("mla_verify_naive");
  EXPECT_EQ(Infer(naive).error_code(), StatusCode::FAILED_PRECONDITION);
}

TEST_F(InferTest, UnknownModelIsInvalidArgument) {
  Req r = ValidRequest();
  r.set_model_name("resnet50");
  EXPECT_EQ(Infer(r).error_code(), StatusCode::INVALID_ARGUMENT);
}

TEST_F(InferTest, EachBadTensorIsNamed) {
  Req r = ValidRequest();
  r.mutable_inputs(0)->set_datatype("FP16");
  ExpectBad(r, "q");
  r = ValidRequest();
  r.mutable_inputs(1)->set_shape(0, 3);  // N differs from q's
  r.set_raw_input_contents(1, std::string(3 * 576 * 2, '\0'));
  ExpectBad(r, "k_extend");
  r = ValidRequest();
  r.mutable_raw_input_contents(2)->pop_back();  // one byte short
  ExpectBad(r, "kv_cache");
  r = ValidRequest();
  r.set_raw_input_contents(3, Bytes<int32_t>({0, 3}));  // ends past N = 2
  ExpectBad(r, "qo_indptr");
  r = ValidRequest();
  r.set_raw_input_contents(4, Bytes<int32_t>({0, 4}));  // past kv_indices' 3 entries
  ExpectBad(r, "kv_indptr");
  r = ValidRequest();
  r.set_raw_input_contents(7, Bytes<int64_t>({0, 9}));  // D * (P + D) = 10
  ExpectBad(r, "mask_indptr");
  r = ValidRequest();
  r.mutable_inputs(6)->set_datatype("INT8");
  ExpectBad(r, "custom_mask");
  r = ValidRequest();
  r.mutable_outputs(0)->set_name("attn");
  ExpectBad(r, "attn");
}

TEST_F(InferTest, ParametersAndRawSlots) {
  Req r = ValidRequest();
  r.mutable_parameters()->erase("sm_scale");
  ExpectBad(r, "sm_scale");
  r = ValidRequest();
  (*r.mutable_parameters())["sm_scale"].set_string_param("0.125");  // string form accepted
  (*r.mutable_parameters())["priority"].set_int64_param(1);         // reserved: ignored
  (*r.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
  (*r.mutable_parameters())["binary_data_output"].set_bool_param(true);
  EXPECT_EQ(Infer(r).error_code(), StatusCode::FAILED_PRECONDITION);
  r = ValidRequest();
  (*r.mutable_parameters())["kjit_unknown"].set_int64_param(1);
  EXPECT_EQ(Infer(r).error_code(), StatusCode::INVALID_ARGUMENT);
  r = ValidRequest();
  (*r.mutable_parameters())["sm_scale"].set_double_param(-1);
  EXPECT_EQ(Infer(r).error_code(), StatusCode::INVALID_ARGUMENT);
  r = ValidRequest();
  r.add_raw_input_contents("extra");
  EXPECT_EQ(Infer(r).error_code(), StatusCode::INVALID_ARGUMENT);
  r = ValidRequest();
  r.mutable_raw_input_contents()->RemoveLast();
  ExpectBad(r, "mask_indptr");
}

// An fp8 e4m3 cache is UINT8 with kjit_kv_dtype "fp8_e4m3" (KServe v2 has no fp8 datatype): a valid
// one gets as far as a valid bf16 request (no GPU here), each mismatch is INVALID_ARGUMENT saying
// what to set.
TEST_F(InferTest, Fp8CacheTravelsAsUint8WithKjitKvDtype) {
  const grpc::Status ok = Infer(Fp8Request());
  EXPECT_EQ(ok.error_code(), StatusCode::FAILED_PRECONDITION) << ok.error_message();
  EXPECT_NE(ok.error_message().find("compile-only"), std::string::npos) << ok.error_message();
  for (const char* numerics : {"dequant", "fp8"}) {
    Req r = Fp8Request();
    (*r.mutable_parameters())["kjit_fp8_numerics"].set_string_param(numerics);
    EXPECT_EQ(Infer(r).error_code(), StatusCode::FAILED_PRECONDITION) << numerics;
    r.set_model_name("mla_verify_naive");  // the oracle has the same signature
    EXPECT_EQ(Infer(r).error_code(), StatusCode::FAILED_PRECONDITION) << numerics;
  }
  Req r = ValidRequest();
  (*r.mutable_parameters())["kjit_kv_dtype"].set_string_param("bf16");  // the default, said
  EXPECT_EQ(Infer(r).error_code(), StatusCode::FAILED_PRECONDITION);

  // UINT8 without the parameter: the message names kv_cache and what to set.
  r = Fp8Request();
  r.mutable_parameters()->erase("kjit_kv_dtype");
  ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "'kv_cache'");
  ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "set parameter 'kjit_kv_dtype' to \"fp8_e4m3\"");
  // BF16 with it: an fp8 cache travels as UINT8.
  r = ValidRequest();
  (*r.mutable_parameters())["kjit_kv_dtype"].set_string_param("fp8_e4m3");
  ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "'kv_cache'");
  ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "travels as UINT8");
  // An unknown cache type, or the parameter of another kind.
  r = Fp8Request();
  (*r.mutable_parameters())["kjit_kv_dtype"].set_string_param("fp8_e5m2");
  ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "use \"bf16\" or \"fp8_e4m3\"");
  r = Fp8Request();
  (*r.mutable_parameters())["kjit_kv_dtype"].set_int64_param(1);
  ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "kjit_kv_dtype");
  // Numerics with a bf16 cache, and an unknown one with an fp8 cache.
  r = ValidRequest();
  (*r.mutable_parameters())["kjit_fp8_numerics"].set_string_param("dequant");
  ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "'kjit_fp8_numerics' applies to an fp8 cache only");
  r = Fp8Request();
  (*r.mutable_parameters())["kjit_fp8_numerics"].set_string_param("fp16");
  ExpectInfer(stub_.get(), r, StatusCode::INVALID_ARGUMENT, "use \"dequant\" or \"fp8\"");
  // One byte per element: a UINT8 cache with bf16's byte count is the wrong size.
  r = Fp8Request();
  r.set_raw_input_contents(2, std::string(4 * 576 * 2, '\x38'));
  ExpectBad(r, "kv_cache");
  // FP8_E4M3 is not a KServe datatype, for the cache or any other tensor.
  r = Fp8Request();
  r.mutable_inputs(2)->set_datatype("FP8_E4M3");
  ExpectBad(r, "kv_cache");
  r = Fp8Request();
  r.mutable_inputs(0)->set_datatype("UINT8");
  r.set_raw_input_contents(0, std::string(2 * 8 * 576, '\0'));
  ExpectBad(r, "q");
}

TEST_F(InferTest, TypedContentsAndDefaultOutputs) {
  Req r = ValidRequest();
  r.mutable_raw_input_contents()->DeleteSubrange(3, 1);  // qo_indptr as int_contents instead
  r.mutable_inputs(3)->mutable_contents()->add_int_contents(0);
  r.mutable_inputs(3)->mutable_contents()->add_int_contents(2);
  r.clear_outputs();  // none requested: o only
  EXPECT_EQ(Infer(r).error_code(), StatusCode::FAILED_PRECONDITION);
  r.mutable_inputs(3)->mutable_contents()->set_int_contents(1, 5);
  ExpectBad(r, "qo_indptr");
}

TEST_F(InferTest, MessagesAboveFourMegabytesAreAccepted) {
  const grpc::Status s = Infer(ValidRequest(/*slots=*/5000));  // 5.8 MB of kv_cache
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION) << s.error_message();
}

TEST_F(InferTest, RegionsForTensors) {
  const testing::ShmObject shm(1 << 16);
  ASSERT_NE(shm.map(), nullptr);
  const std::string& key = shm.key();
  uint8_t* map = shm.map();
  {
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryRegisterRequest reg;
    reg.set_name("host");
    reg.set_key(key);
    reg.set_offset(0);
    reg.set_byte_size(1 << 16);
    inference::SystemSharedMemoryRegisterResponse resp;
    ASSERT_TRUE(stub_->SystemSharedMemoryRegister(&ctx, reg, &resp).ok());
  }
  // qo_indptr (input 3) from a region; raw slots then skip it.
  const int32_t good[2] = {0, 2}, bad[2] = {0, 1};
  std::memcpy(map + 256, good, sizeof(good));
  std::memcpy(map + 512, bad, sizeof(bad));
  Req r = ValidRequest();
  UseRegion(&r, 3, "host", 256, 8);
  EXPECT_EQ(Infer(r).error_code(), StatusCode::FAILED_PRECONDITION);
  r = ValidRequest();
  UseRegion(&r, 3, "host", 512, 8);  // contents read from shared memory: ends at 1, N = 2
  ExpectBad(r, "qo_indptr");
  r = ValidRequest();
  UseRegion(&r, 3, "nowhere", 256, 8);
  EXPECT_EQ(Infer(r).error_code(), StatusCode::NOT_FOUND);
  r = ValidRequest();
  UseRegion(&r, 3, "host", (1 << 16) - 4, 8);  // crosses the end
  EXPECT_EQ(Infer(r).error_code(), StatusCode::INVALID_ARGUMENT);
  r = ValidRequest();
  UseRegion(&r, 3, "host", std::numeric_limits<int64_t>::max() - 2, 8);  // overflow
  EXPECT_EQ(Infer(r).error_code(), StatusCode::INVALID_ARGUMENT);
  r = ValidRequest();
  UseRegion(&r, 3, "host", 256, 4);  // byte size must match [2] INT32 exactly
  ExpectBad(r, "qo_indptr");
  r = ValidRequest();  // an output capacity too small
  SetRegion(r.mutable_outputs(0)->mutable_parameters(), "host", 0, 2 * 8 * 512 * 2 - 2);
  ExpectBad(r, "o");
  SetRegion(r.mutable_outputs(0)->mutable_parameters(), "host", 0, 2 * 8 * 512 * 2);
  EXPECT_EQ(Infer(r).error_code(), StatusCode::FAILED_PRECONDITION);

  grpc::ClientContext ctx;
  inference::SystemSharedMemoryUnregisterResponse ur;
  stub_->SystemSharedMemoryUnregister(&ctx, {}, &ur);
}

TEST_F(InferTest, StatisticsCountFailures) {
  auto fails = [&] {
    grpc::ClientContext ctx;
    inference::ModelStatisticsRequest req;
    req.set_name("mla_verify");
    inference::ModelStatisticsResponse resp;
    EXPECT_TRUE(stub_->ModelStatistics(&ctx, req, &resp).ok());
    return resp.model_stats(0).inference_stats().fail().count();
  };
  const uint64_t before = fails();
  Infer(ValidRequest());
  Infer(ValidRequest());
  EXPECT_EQ(fails(), before + 2);
}

}  // namespace
}  // namespace kjit::testing
