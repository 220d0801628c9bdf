// The launch layer's index-pointer handling on the host: the launch must stage the bytes that were
// validated, never re-read the client's memory (a client rewriting its shared memory between the
// check and the launch would otherwise hand the kernels unchecked offsets). Requests come through
// the daemon's decoder, as a ModelInfer would.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/kernels/mla_verify/mla_family.h"
#include "runtime/kernels/mla_verify/schema.h"
#include "runtime/launch/launch_state.h"
#include "runtime/server/infer_decode.h"
#include "tests/e2e/infer_requests.h"
#include "tests/unit/shm_object.h"

namespace kjit::launch {
namespace {

using internal::LaunchState;
using internal::Located;
using kjit::testing::Bytes;
using kjit::testing::Req;

// B = 1, D = 2, P = 3, H = 8, S = 4; qo_indptr, kv_indptr and mask_indptr from region "host" at
// byte offsets 0, 64 and 128.
Req RegionIndptrRequest() {
  Req r = kjit::testing::ValidRequest();
  kjit::testing::UseRegion(&r, 7, "host", 128, 16);  // mask_indptr
  kjit::testing::UseRegion(&r, 4, "host", 64, 8);    // kv_indptr
  kjit::testing::UseRegion(&r, 3, "host", 0, 8);     // qo_indptr
  return r;
}

constexpr int kIndexPointers[] = {kernels::kInQoIndptr, kernels::kInKvIndptr, kernels::kInMaskIndptr};

class LaunchIndexPointersTest : public ::testing::Test {
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
    ASSERT_TRUE(regions_.AddRegion(std::move(region)).ok());
  }
  void TearDown() override { regions_.Clear(); }
  template <typename T>
  void Write(size_t offset, std::initializer_list<T> v) {
    std::memcpy(shm_.map() + offset, std::data(v), v.size() * sizeof(T));
  }
  // Decoded, checked by the family and located, as the launcher does before any device work.
  Status Prepare(const Req& r) {
    req_ = r;
    decoded_ = server::DecodedInfer();
    KJIT_RETURN_IF_ERROR(server::DecodeInferRequest(req_, &decoded_));
    s_ = LaunchState();
    s_.request = &decoded_.request;
    KJIT_RETURN_IF_ERROR(internal::Check(decoded_.request, &s_, &result_));
    return internal::Locate(regions_, &s_);
  }
  const Located& Input(int slot) const { return s_.inputs[s_.launch->input_slots()[slot]]; }
  const kernels::MlaVerifyProblem& Problem() const { return *kernels::MlaVerifyProblemOf(*s_.launch); }

  testing::ShmObject shm_{4096};
  ipc::RegionRegistry regions_;
  Req req_;
  server::DecodedInfer decoded_;
  LaunchState s_;
  LaunchResult result_;
};

TEST_F(LaunchIndexPointersTest, LaunchUsesTheValidatedCopyNotTheRegion) {
  ASSERT_TRUE(Prepare(RegionIndptrRequest()).ok());
  EXPECT_EQ(Input(kernels::kInQoIndptr).where, Located::Where::kShared);
  EXPECT_FALSE(internal::IndexPointersOnDevice(s_));
  ASSERT_TRUE(internal::CheckIndexPointers(&s_).ok());
  // The client now rewrites every index pointer with offsets far outside its buffers.
  Write<int32_t>(0, {0, 1 << 30});
  Write<int32_t>(64, {0, 1 << 30});
  Write<int64_t>(128, {std::numeric_limits<int64_t>::max() - 4, 0});
  const std::string want[] = {Bytes<int32_t>({0, 2}), Bytes<int32_t>({0, 3}), Bytes<int64_t>({0, 10})};
  for (int k = 0; k < 3; ++k) {
    const Located& l = Input(kIndexPointers[k]);
    EXPECT_EQ(l.where, Located::Where::kHost) << "slot " << kIndexPointers[k];
    EXPECT_EQ(l.region, nullptr) << "slot " << kIndexPointers[k];
    ASSERT_EQ(l.checked.size(), want[k].size());
    EXPECT_EQ(std::memcmp(internal::HostBytes(l), want[k].data(), want[k].size()), 0) << "slot " << kIndexPointers[k];
  }
  EXPECT_EQ(Problem().max_draft, 2);
  EXPECT_EQ(Problem().max_prefix, 3);
}

TEST_F(LaunchIndexPointersTest, RegionContentsAreCheckedAndSourcesKeptOnError) {
  Write<int64_t>(128, {0, 9});  // D * (P + D) = 10
  ASSERT_TRUE(Prepare(RegionIndptrRequest()).ok());
  const Status s = internal::CheckIndexPointers(&s_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'mask_indptr'"), std::string::npos) << s;
  EXPECT_EQ(Input(kernels::kInMaskIndptr).where, Located::Where::kShared);
}

TEST_F(LaunchIndexPointersTest, UnregisterAfterLocateKeepsTheMappingAlive) {
  ASSERT_TRUE(Prepare(RegionIndptrRequest()).ok());
  regions_.RemoveRegion(ipc::RegionKind::kSystem, "host", "");  // a concurrent unregister
  EXPECT_EQ(regions_.FindRegion("host", "").status().code(), absl::StatusCode::kNotFound);
  // The request's reference keeps the mapping: the check still reads the client's bytes.
  ASSERT_TRUE(internal::CheckIndexPointers(&s_).ok());
  EXPECT_EQ(Input(kernels::kInKvIndptr).checked, std::vector<uint8_t>({0, 0, 0, 0, 3, 0, 0, 0}));
}

TEST_F(LaunchIndexPointersTest, UnknownRegionIsNotFoundAndOutOfRangeIsInvalid) {
  Req r = RegionIndptrRequest();
  kjit::testing::SetRegion(r.mutable_inputs(3)->mutable_parameters(), "nope", 0, 8);
  Status s = Prepare(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("'qo_indptr'"), std::string::npos) << s;
  r = RegionIndptrRequest();
  kjit::testing::SetRegion(r.mutable_inputs(3)->mutable_parameters(), "host", 4090, 8);
  s = Prepare(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("outside region 'host'"), std::string::npos) << s;
}

// Device-resident index pointers reach the check as host copies read back by the launch (pinned
// memory). Simulated here by marking them CUDA-resident: the check must read the copies, never the
// region, and leave the checked bytes owned by the launch.
TEST_F(LaunchIndexPointersTest, DeviceResidentIndexPointersAreCheckedFromTheReadBackCopies) {
  ASSERT_TRUE(Prepare(RegionIndptrRequest()).ok());
  for (int slot : kIndexPointers) s_.inputs[s_.launch->input_slots()[slot]].where = Located::Where::kCuda;
  EXPECT_TRUE(internal::IndexPointersOnDevice(s_));
  // Without the copies: refused, not read from anywhere else.
  EXPECT_EQ(internal::CheckIndexPointers(&s_).code(), absl::StatusCode::kFailedPrecondition);
  // The region holds inconsistent values; the copies are what the check and the launch must use.
  Write<int32_t>(0, {0, 1 << 30});
  const std::string copy[] = {Bytes<int32_t>({0, 2}), Bytes<int32_t>({0, 3}), Bytes<int64_t>({0, 10})};
  std::vector<const uint8_t*> copies(kernels::kNumMlaVerifyInputs, nullptr);
  for (int k = 0; k < 3; ++k) copies[kIndexPointers[k]] = reinterpret_cast<const uint8_t*>(copy[k].data());
  ASSERT_TRUE(internal::CheckIndexPointers(&s_, copies).ok());
  EXPECT_FALSE(internal::IndexPointersOnDevice(s_));
  for (int k = 0; k < 3; ++k) {
    const Located& l = Input(kIndexPointers[k]);
    EXPECT_EQ(l.where, Located::Where::kHost) << "slot " << kIndexPointers[k];
    EXPECT_EQ(l.region, nullptr) << "slot " << kIndexPointers[k];
    EXPECT_EQ(std::string(l.checked.begin(), l.checked.end()), copy[k]) << "slot " << kIndexPointers[k];
    EXPECT_NE(static_cast<const void*>(internal::HostBytes(l)), static_cast<const void*>(copy[k].data()));
  }
  EXPECT_EQ(Problem().max_draft, 2);
  EXPECT_EQ(Problem().max_prefix, 3);
}

TEST_F(LaunchIndexPointersTest, BadReadBackCopiesAreRefusedAndSourcesKept) {
  ASSERT_TRUE(Prepare(RegionIndptrRequest()).ok());
  for (int slot : kIndexPointers) s_.inputs[s_.launch->input_slots()[slot]].where = Located::Where::kCuda;
  const std::string qo = Bytes<int32_t>({0, 2}), kv = Bytes<int32_t>({0, 3}), mask = Bytes<int64_t>({0, 9});
  std::vector<const uint8_t*> copies(kernels::kNumMlaVerifyInputs, nullptr);
  copies[kernels::kInQoIndptr] = reinterpret_cast<const uint8_t*>(qo.data());
  copies[kernels::kInKvIndptr] = reinterpret_cast<const uint8_t*>(kv.data());
  copies[kernels::kInMaskIndptr] = reinterpret_cast<const uint8_t*>(mask.data());
  const Status s = internal::CheckIndexPointers(&s_, copies);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'mask_indptr'"), std::string::npos) << s;
  EXPECT_TRUE(internal::IndexPointersOnDevice(s_));
}

// kjit_max_draft / kjit_max_prefix bound a launch whose index pointers stay on the GPU; without them
// the shapes' bounds do (min(N, 64) draft tokens, M prefix rows), and they cap the hints: a hint
// past them (which would size the workspace, kept by the GPU, for rows no request can have) is
// clamped, one within them is kept.
TEST_F(LaunchIndexPointersTest, BoundsAreParsedCheckedAndUsed) {
  ASSERT_TRUE(Prepare(RegionIndptrRequest()).ok());
  EXPECT_FALSE(s_.launch->has_bounds());
  s_.launch->AssumeBounds();
  ASSERT_EQ(Problem().num_q, 2);
  ASSERT_EQ(Problem().num_kv_indices, 3);
  EXPECT_EQ(Problem().max_draft, 2);
  EXPECT_EQ(Problem().max_prefix, 3);

  for (const auto& [draft, prefix, want_draft, want_prefix] : std::vector<std::tuple<int64_t, int64_t, int, int64_t>>{
           {7, 123456, 2, 3}, {64, std::numeric_limits<int64_t>::max(), 2, 3}, {1, 2, 1, 2}, {1, 0, 1, 0}}) {
    Req r = RegionIndptrRequest();
    (*r.mutable_parameters())["kjit_max_draft"].set_int64_param(draft);
    (*r.mutable_parameters())["kjit_max_prefix"].set_int64_param(prefix);
    ASSERT_TRUE(Prepare(r).ok());
    EXPECT_TRUE(s_.launch->has_bounds());
    s_.launch->AssumeBounds();
    EXPECT_EQ(Problem().max_draft, want_draft) << draft;
    EXPECT_EQ(Problem().max_prefix, want_prefix) << prefix;
  }

  for (const auto& [name, value] : std::vector<std::pair<std::string, int64_t>>{
           {"kjit_max_draft", 0}, {"kjit_max_draft", 65}, {"kjit_max_prefix", -1}}) {
    Req bad = RegionIndptrRequest();
    (*bad.mutable_parameters())[name].set_int64_param(value);
    const Status s = Prepare(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << " " << value;
    EXPECT_NE(s.message().find(name), std::string::npos) << s;
  }
  Req text = RegionIndptrRequest();
  (*text.mutable_parameters())["kjit_max_draft"].set_string_param("16");
  EXPECT_EQ(Prepare(text).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LaunchParams, ReservedParameterNames) {
  for (const char* name : {"sequence_id", "sequence_start", "priority", "timeout", "headers",
                           "binary_data_output", "triton_enable_empty_final_response"}) {
    EXPECT_TRUE(kernels::IsReservedParameter(name)) << name;
  }
  for (const char* name : {"sm_scale", "kjit_device", "prio", "timeouts", "header", "Triton_x"}) {
    EXPECT_FALSE(kernels::IsReservedParameter(name)) << name;
  }
}

// Client text in messages is bounded and escaped: a long or newline-laden parameter name cannot
// flood a reply or forge a log line.
TEST(LaunchParams, UnknownParameterNamesAreQuotedBoundedAndEscaped) {
  const std::vector<kernels::Param> params = {{std::string(1 << 20, 'x') + "\nkjitd error: forged", int64_t{1}}};
  auto typed = kernels::ConvertParams(kernels::MlaVerifyParamSchema(), params);
  ASSERT_FALSE(typed.ok());
  EXPECT_EQ(typed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(typed.status().message().size(), 600u) << typed.status().message().size();
  EXPECT_EQ(typed.status().message().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace kjit::launch
