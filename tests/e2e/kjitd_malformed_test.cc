// Malformed ModelInfer requests against a real compile-only kjitd: every malformed field is its
// documented code (INVALID_ARGUMENT naming the tensor or parameter, NOT_FOUND for a region), and a
// valid request gets as far as the missing GPU (FAILED_PRECONDITION).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kjit/v1/kernel_service.grpc.pb.h"
#include "tests/e2e/daemon_fixture.h"
#include "tests/e2e/infer_requests.h"

namespace kjit::testing {
namespace {

using grpc::StatusCode;
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

class MalformedTest : public DaemonSuite {
 protected:
  // Expects `code` and, for INVALID_ARGUMENT, a message naming `what`.
  void Expect(const Req& r, StatusCode code, const std::string& what = "") { ExpectInfer(stub_.get(), r, code, what); }
};

TEST_F(MalformedTest, MalformedShapes) {
  Expect(ValidRequest(), StatusCode::FAILED_PRECONDITION);  // valid: fails only for want of a GPU
  Req r = ValidRequest();
  r.mutable_inputs(0)->set_shape(0, -2);
  Expect(r, StatusCode::INVALID_ARGUMENT, "'q'");
  r = ValidRequest();  // 2^40 * 2^20 * 576 * 2 bytes: the element count overflows 64 bits
  r.mutable_inputs(0)->set_shape(0, int64_t{1} << 40);
  r.mutable_inputs(0)->set_shape(1, int64_t{1} << 20);
  Expect(r, StatusCode::INVALID_ARGUMENT, "'q'");
  r = ValidRequest();
  r.mutable_inputs(2)->set_shape(0, kI64Max);
  Expect(r, StatusCode::INVALID_ARGUMENT, "'kv_cache'");
  r = ValidRequest();
  r.mutable_inputs(0)->add_shape(1);  // rank 4
  Expect(r, StatusCode::INVALID_ARGUMENT, "'q'");
  r = ValidRequest();
  r.mutable_inputs(0)->clear_shape();  // rank 0
  Expect(r, StatusCode::INVALID_ARGUMENT, "'q'");
  r = ValidRequest();
  r.mutable_raw_input_contents(1)->push_back('\0');  // one byte too many: sizes are exact
  Expect(r, StatusCode::INVALID_ARGUMENT, "'k_extend'");
  r = ValidRequest();
  r.mutable_inputs(0)->set_datatype("bf16");  // datatype strings are case-sensitive
  Expect(r, StatusCode::INVALID_ARGUMENT, "'q'");
  r = ValidRequest();
  r.mutable_inputs(5)->set_datatype("BYTES");
  Expect(r, StatusCode::INVALID_ARGUMENT, "'kv_indices'");
}

TEST_F(MalformedTest, EmptyTensorsAreValid) {
  Req r = ValidRequest();  // S = 0, P = 0: an empty kv_cache and kv_indices, mask D * D = 4
  *r.mutable_raw_input_contents(2) = "";
  r.mutable_inputs(2)->set_shape(0, 0);
  *r.mutable_raw_input_contents(4) = Bytes<int32_t>({0, 0});
  *r.mutable_raw_input_contents(5) = "";
  r.mutable_inputs(5)->set_shape(0, 0);
  *r.mutable_raw_input_contents(6) = std::string(4, '\1');
  r.mutable_inputs(6)->set_shape(0, 4);
  *r.mutable_raw_input_contents(7) = Bytes<int64_t>({0, 4});
  Expect(r, StatusCode::FAILED_PRECONDITION);
  r.mutable_inputs(0)->set_shape(0, 0);  // N = 0 while qo_indptr says 2 rows
  *r.mutable_raw_input_contents(0) = "";
  Expect(r, StatusCode::INVALID_ARGUMENT, "'k_extend'");
}

TEST_F(MalformedTest, NamesAndCounts) {
  const char* names[] = {"q", "k_extend", "kv_cache", "qo_indptr", "kv_indptr", "kv_indices",
                         "custom_mask", "mask_indptr"};
  for (int i = 0; i < 8; ++i) {
    Req r = ValidRequest();
    DropInput(&r, i);
    Expect(r, StatusCode::INVALID_ARGUMENT, i == 6 ? "custom_mask" : "'" + std::string(names[i]) + "'");
  }
  Req r = ValidRequest();
  AddInput(&r, "kv_indptr", "INT32", {2}, Bytes<int32_t>({0, 3}));  // a second kv_indptr
  Expect(r, StatusCode::INVALID_ARGUMENT, "'kv_indptr'");
  r = ValidRequest();
  AddInput(&r, "packed_mask", "UINT32", {2}, Bytes<uint32_t>({1, 3}));  // and custom_mask
  Expect(r, StatusCode::INVALID_ARGUMENT, "custom_mask");
  r = ValidRequest();
  r.add_outputs()->set_name("o");
  Expect(r, StatusCode::INVALID_ARGUMENT, "'o'");
  r = ValidRequest();
  r.mutable_raw_input_contents()->RemoveLast();  // fewer raw slots than inputs
  Expect(r, StatusCode::INVALID_ARGUMENT, "'mask_indptr'");
  r = ValidRequest();
  r.add_raw_input_contents(Bytes<int64_t>({0}));  // more
  Expect(r, StatusCode::INVALID_ARGUMENT, "raw_input_contents");
  r = ValidRequest();
  r.set_model_version("7");
  Expect(r, StatusCode::INVALID_ARGUMENT, "version");
  r = ValidRequest();
  for (const char* reserved : {"sequence_id", "timeout", "headers"}) {
    (*r.mutable_parameters())[reserved].set_int64_param(3);
  }
  Expect(r, StatusCode::FAILED_PRECONDITION);
}

TEST_F(MalformedTest, ExtremeIndexPointers) {
  const int32_t i32min = std::numeric_limits<int32_t>::min(), i32max = std::numeric_limits<int32_t>::max();
  Req r = ValidRequest();
  *r.mutable_raw_input_contents(3) = Bytes<int32_t>({i32min, i32max});
  Expect(r, StatusCode::INVALID_ARGUMENT, "'qo_indptr'");
  r = ValidRequest();
  *r.mutable_raw_input_contents(3) = Bytes<int32_t>({0, i32max});
  Expect(r, StatusCode::INVALID_ARGUMENT, "'qo_indptr'");
  r = ValidRequest();
  *r.mutable_raw_input_contents(4) = Bytes<int32_t>({0, i32min});
  Expect(r, StatusCode::INVALID_ARGUMENT, "'kv_indptr'");
  r = ValidRequest();
  *r.mutable_raw_input_contents(7) = Bytes<int64_t>({kI64Max - 4, kI64Max});
  Expect(r, StatusCode::INVALID_ARGUMENT, "'mask_indptr'");
  r = ValidRequest();
  *r.mutable_raw_input_contents(7) = Bytes<int64_t>({kI64Max - 9, kI64Max + 0});  // spans 9
  Expect(r, StatusCode::INVALID_ARGUMENT, "'mask_indptr'");
  r = ValidRequest();
  *r.mutable_raw_input_contents(7) = Bytes<int64_t>({std::numeric_limits<int64_t>::min(), 10});
  Expect(r, StatusCode::INVALID_ARGUMENT, "'mask_indptr'");
}

TEST_F(MalformedTest, SharedMemoryParameters) {
  auto params = [](Req* r, int i) { return r->mutable_inputs(i)->mutable_parameters(); };
  Req r = ValidRequest();
  (*params(&r, 3))["shared_memory_offset"].set_int64_param(0);  // without a region
  Expect(r, StatusCode::INVALID_ARGUMENT, "'qo_indptr'");
  r = ValidRequest();
  kjit::testing::UseRegion(&r, 3, "nowhere", 0, 8);  // otherwise valid: regions are looked up after the checks
  Expect(r, StatusCode::NOT_FOUND, "nowhere");
  (*params(&r, 3))["shared_memory_byte_size"].set_string_param("8");  // wrong parameter type
  Expect(r, StatusCode::INVALID_ARGUMENT, "shared_memory_byte_size");
  (*params(&r, 3))["shared_memory_byte_size"].set_int64_param(8);
  (*params(&r, 3))["shared_memory_offset"].set_int64_param(-8);
  Expect(r, StatusCode::INVALID_ARGUMENT, "'qo_indptr'");
  (*params(&r, 3)).erase("shared_memory_byte_size");
  (*params(&r, 3)).erase("shared_memory_offset");
  Expect(r, StatusCode::INVALID_ARGUMENT, "shared_memory_byte_size");
  r = ValidRequest();
  auto& out = *r.mutable_outputs(0)->mutable_parameters();
  out["shared_memory_region"].set_string_param("missing-output-region");
  out["shared_memory_byte_size"].set_int64_param(2 * 8 * 512 * 2);
  Expect(r, StatusCode::NOT_FOUND, "missing-output-region");
  r = ValidRequest();
  r.mutable_inputs(4)->mutable_contents()->add_int_contents(0);  // contents and a raw slot
  r.mutable_inputs(4)->mutable_contents()->add_int_contents(3);
  Expect(r, StatusCode::INVALID_ARGUMENT, "raw_input_contents");
  r = ValidRequest();
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.f);  // BF16 cannot be typed
  Expect(r, StatusCode::INVALID_ARGUMENT, "'q'");
}

TEST_F(MalformedTest, ArchStringsAreStrict) {
  auto kernels = kjit::v1::KernelService::NewStub(daemon_->Channel());
  for (const char* arch : {"sm_", "sm_9", "sm_1234", "sm_90 --define-macro=X", "sm_90ab", "sm_/../x",
                           "compute_90", "SM_90"}) {
    grpc::ClientContext c1, c2;
    kjit::v1::GetKernelRequest gk;
    gk.set_family("mla_verify_naive");
    gk.set_specialization("bool");
    gk.set_arch(arch);
    kjit::v1::GetKernelResponse gkr;
    const grpc::Status s = kernels->GetKernel(&c1, gk, &gkr);
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << arch << ": " << s.error_message();
    kjit::v1::CompileRequest cr;
    cr.set_family("mla_verify_naive");
    cr.add_archs(arch);
    auto stream = kernels->Compile(&c2, cr);
    kjit::v1::CompileProgress progress;
    EXPECT_FALSE(stream->Read(&progress)) << arch << ": compiled";
    EXPECT_EQ(stream->Finish().error_code(), StatusCode::INVALID_ARGUMENT) << arch;
  }
  // Half a megabyte of family, specialization or arch with terminal escapes: refused with the name
  // shortened and escaped, not echoed whole into the status. (A request of over a MiB is refused
  // before its parse: ControlRequestsOverAMebibyteAreRefusedUnparsed.)
  const std::string hostile = "\x1b[2J" + std::string(1 << 19, 'a');
  for (int field = 0; field < 3; ++field) {
    grpc::ClientContext c;
    kjit::v1::GetKernelRequest gk;
    gk.set_family(field == 0 ? hostile : "mla_verify_naive");
    gk.set_specialization(field == 1 ? hostile : "bool");
    gk.set_arch(field == 2 ? hostile : "sm_90");
    kjit::v1::GetKernelResponse gkr;
    const grpc::Status s = kernels->GetKernel(&c, gk, &gkr);
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_LT(s.error_message().size(), 2000u) << field;
    EXPECT_EQ(s.error_message().find('\x1b'), std::string::npos) << field << ": " << s.error_message().substr(0, 200);
  }
}

// Every method's request but ModelInfer's is refused past 1 MiB from its size, before protobuf
// parses it: RESOURCE_EXHAUSTED naming the bound, and the daemon serves on.
TEST_F(MalformedTest, ControlRequestsOverAMebibyteAreRefusedUnparsed) {
  auto kernels = kjit::v1::KernelService::NewStub(daemon_->Channel());
  const std::string big(size_t{1} << 20, 'a');
  grpc::ClientContext c1, c2;
  kjit::v1::GetKernelRequest gk;
  gk.set_family(big);
  kjit::v1::GetKernelResponse gkr;
  const grpc::Status s = kernels->GetKernel(&c1, gk, &gkr);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find(absl::StrCat("kjit.v1.GetKernelRequest of ", gk.ByteSizeLong(), " bytes")),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("at most 1048576"), std::string::npos) << s.error_message();
  kjit::v1::CompileRequest cr;
  cr.add_archs(big);
  auto stream = kernels->Compile(&c2, cr);
  kjit::v1::CompileProgress progress;
  EXPECT_FALSE(stream->Read(&progress));
  EXPECT_EQ(stream->Finish().error_code(), StatusCode::RESOURCE_EXHAUSTED);
  grpc::ClientContext c3;
  kjit::v1::ListKernelsResponse lk;
  EXPECT_TRUE(kernels->ListKernels(&c3, kjit::v1::ListKernelsRequest(), &lk).ok());
}

}  // namespace
}  // namespace kjit::testing
