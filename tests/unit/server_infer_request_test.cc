// ModelInfer request parsing and the index-pointer check on the host: the launch must stage the
// bytes that were validated, never re-read the client's memory (a client rewriting its shared
// memory between the check and the launch would otherwise hand the kernels unchecked offsets).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "runtime/server/infer_request.h"
#include "tests/e2e/infer_requests.h"
#include "tests/unit/shm_object.h"

namespace kjit::server {
namespace {

using kjit::testing::Req;
using kjit::testing::Bytes;

// B = 1, D = 2, P = 3, H = 8, S = 4; qo_indptr, kv_indptr and mask_indptr from region "host" at
// byte offsets 0, 64 and 128.
Req RegionIndptrRequest() {
  Req r = kjit::testing::ValidRequest();
  kjit::testing::UseRegion(&r, 7, "host", 128, 16);  // mask_indptr
  kjit::testing::UseRegion(&r, 4, "host", 64, 8);    // kv_indptr
  kjit::testing::UseRegion(&r, 3, "host", 0, 8);     // qo_indptr
  return r;
}

class InferRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(shm_.map(), nullptr);
    Write<int32_t>(0, {0, 2});
    Write<int32_t>(64, {0, 3});
    Write<int64_t>(128, {0, 10});
    auto shm = ipc::SystemShmRegion::Open(shm_.key(), 0, 4096);
    ASSERT_TRUE(shm.ok()) << shm.status();
    auto region = std::make_shared<ipc::Region>();
    region->name = "host";
    region->system = *std::move(shm);
    ASSERT_TRUE(d_.regions.AddRegion(std::move(region)).ok());
  }
  void TearDown() override { d_.regions.Clear(); }
  template <typename T>
  void Write(size_t offset, std::initializer_list<T> v) {
    std::memcpy(shm_.map() + offset, std::data(v), v.size() * sizeof(T));
  }
  const TensorSource& Source(const ParsedInfer& p, int slot) {
    return p.input_src[p.layout.input_slot[slot]];
  }

  testing::ShmObject shm_{4096};
  Daemon d_;
};

TEST_F(InferRequestTest, LaunchUsesTheValidatedCopyNotTheRegion) {
  auto parsed = ParseInferRequest(&d_, RegionIndptrRequest());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ParsedInfer p = *std::move(parsed);
  EXPECT_EQ(Source(p, kernels::kInQoIndptr).kind, TensorSource::Kind::kSystem);
  ASSERT_TRUE(CheckIndptrs(&p).ok());
  // The client now rewrites every index pointer with offsets far outside its buffers.
  Write<int32_t>(0, {0, 1 << 30});
  Write<int32_t>(64, {0, 1 << 30});
  Write<int64_t>(128, {std::numeric_limits<int64_t>::max() - 4, 0});
  const std::string want[] = {Bytes<int32_t>({0, 2}), Bytes<int32_t>({0, 3}), Bytes<int64_t>({0, 10})};
  const auto& slots = kIndptrSlots;
  for (int k = 0; k < 3; ++k) {
    const TensorSource& s = Source(p, slots[k]);
    EXPECT_EQ(s.kind, TensorSource::Kind::kInline) << "slot " << slots[k];
    EXPECT_EQ(s.region, nullptr) << "slot " << slots[k];
    EXPECT_EQ(s.owned, want[k]) << "slot " << slots[k];
    ASSERT_EQ(s.byte_size, want[k].size());
    EXPECT_EQ(std::memcmp(s.host, want[k].data(), want[k].size()), 0) << "slot " << slots[k];
  }
  EXPECT_EQ(p.problem.max_draft, 2);
  EXPECT_EQ(p.problem.max_prefix, 3);
}

TEST_F(InferRequestTest, RegionContentsAreCheckedAndSourcesKeptOnError) {
  Write<int64_t>(128, {0, 9});  // D * (P + D) = 10
  auto parsed = ParseInferRequest(&d_, RegionIndptrRequest());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ParsedInfer p = *std::move(parsed);
  const Status s = CheckIndptrs(&p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'mask_indptr'"), std::string::npos) << s;
}

TEST_F(InferRequestTest, UnregisterAfterParseKeepsTheMappingAlive) {
  auto parsed = ParseInferRequest(&d_, RegionIndptrRequest());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ParsedInfer p = *std::move(parsed);
  d_.regions.RemoveRegion(ipc::RegionKind::kSystem, "host");  // a concurrent unregister
  EXPECT_EQ(d_.regions.FindRegion("host").status().code(), absl::StatusCode::kNotFound);
  // The request's reference keeps the mapping: the check still reads the client's bytes.
  ASSERT_TRUE(CheckIndptrs(&p).ok());
  EXPECT_EQ(Source(p, kernels::kInKvIndptr).owned, Bytes<int32_t>({0, 3}));
}

// Device-resident index pointers reach the check as host copies read back by the launch (pinned
// memory). Simulated here by marking the sources CUDA-resident: the check must read the copies,
// never the region, and leave the checked bytes owned by the request.
TEST_F(InferRequestTest, DeviceResidentIndptrsAreCheckedFromTheReadBackCopies) {
  auto parsed = ParseInferRequest(&d_, RegionIndptrRequest());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ParsedInfer p = *std::move(parsed);
  const auto& slots = kIndptrSlots;
  for (int slot : slots) p.input_src[p.layout.input_slot[slot]].kind = TensorSource::Kind::kCuda;
  EXPECT_TRUE(HasCudaIndptr(p));
  // Without the copies: refused, not read from anywhere else.
  EXPECT_EQ(CheckIndptrs(&p).code(), absl::StatusCode::kFailedPrecondition);
  // The region holds inconsistent values; the copies are what the check and the launch must use.
  Write<int32_t>(0, {0, 1 << 30});
  const std::string copy[] = {Bytes<int32_t>({0, 2}), Bytes<int32_t>({0, 3}), Bytes<int64_t>({0, 10})};
  IndptrCopies copies;
  for (int k = 0; k < 3; ++k) copies[k] = reinterpret_cast<const uint8_t*>(copy[k].data());
  ASSERT_TRUE(CheckIndptrs(&p, copies).ok());
  EXPECT_FALSE(HasCudaIndptr(p));
  for (int k = 0; k < 3; ++k) {
    const TensorSource& s = Source(p, slots[k]);
    EXPECT_EQ(s.kind, TensorSource::Kind::kInline) << "slot " << slots[k];
    EXPECT_EQ(s.region, nullptr) << "slot " << slots[k];
    EXPECT_EQ(s.owned, copy[k]) << "slot " << slots[k];
    EXPECT_NE(static_cast<const void*>(s.host), static_cast<const void*>(copy[k].data()));
  }
  EXPECT_EQ(p.problem.max_draft, 2);
  EXPECT_EQ(p.problem.max_prefix, 3);
}

TEST_F(InferRequestTest, BadReadBackCopiesAreRefusedAndSourcesKept) {
  auto parsed = ParseInferRequest(&d_, RegionIndptrRequest());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ParsedInfer p = *std::move(parsed);
  for (int slot : kIndptrSlots) {
    p.input_src[p.layout.input_slot[slot]].kind = TensorSource::Kind::kCuda;
  }
  const std::string qo = Bytes<int32_t>({0, 2}), kv = Bytes<int32_t>({0, 3}), mask = Bytes<int64_t>({0, 9});
  const IndptrCopies copies = {reinterpret_cast<const uint8_t*>(qo.data()),
                               reinterpret_cast<const uint8_t*>(kv.data()),
                               reinterpret_cast<const uint8_t*>(mask.data())};
  const Status s = CheckIndptrs(&p, copies);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'mask_indptr'"), std::string::npos) << s;
  EXPECT_TRUE(HasCudaIndptr(p));
}

// kjit_max_draft / kjit_max_prefix plan an asynchronous launch whose index pointers stay on the
// GPU; without them the shapes' bounds do (min(N, 64) draft tokens, M prefix rows).
TEST_F(InferRequestTest, PlanningHintsAreParsedCheckedAndUsed) {
  auto parsed = ParseInferRequest(&d_, RegionIndptrRequest());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ParsedInfer p = *std::move(parsed);
  PlanUnchecked(&p);
  EXPECT_EQ(p.problem.max_draft, std::clamp<int64_t>(p.problem.num_q, 1, kernels::kMlaMaxDraft));
  EXPECT_EQ(p.problem.max_prefix, p.problem.num_kv_indices);

  Req r = RegionIndptrRequest();
  (*r.mutable_parameters())["kjit_max_draft"].set_int64_param(7);
  (*r.mutable_parameters())["kjit_max_prefix"].set_int64_param(123456);
  parsed = ParseInferRequest(&d_, r);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  p = *std::move(parsed);
  PlanUnchecked(&p);
  EXPECT_EQ(p.problem.max_draft, 7);
  EXPECT_EQ(p.problem.max_prefix, 123456);

  for (const auto& [name, value] : std::vector<std::pair<std::string, int64_t>>{
           {"kjit_max_draft", 0}, {"kjit_max_draft", 65}, {"kjit_max_prefix", -1}}) {
    Req bad = RegionIndptrRequest();
    (*bad.mutable_parameters())[name].set_int64_param(value);
    const auto s = ParseInferRequest(&d_, bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << " " << value;
    EXPECT_NE(s.message().find(name), std::string::npos) << s;
  }
  Req text = RegionIndptrRequest();
  (*text.mutable_parameters())["kjit_max_draft"].set_string_param("16");
  EXPECT_EQ(ParseInferRequest(&d_, text).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InferRequestParse, ReservedParameterNames) {
  for (const char* name : {"sequence_id", "sequence_start", "priority", "timeout", "headers",
                           "binary_data_output", "triton_enable_empty_final_response"}) {
    EXPECT_TRUE(IsReservedParameter(name)) << name;
  }
  for (const char* name : {"sm_scale", "kjit_device", "prio", "timeouts", "header", "Triton_x"}) {
    EXPECT_FALSE(IsReservedParameter(name)) << name;
  }
}

}  // namespace
}  // namespace kjit::server
