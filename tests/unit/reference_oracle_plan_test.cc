// The oracle family's host side (plan, launch argument checks, catalog entries) on the CPU.
#include <gtest/gtest.h>

#include "runtime/kernels/registry.h"
#include "runtime/kernels/kernel_sources.h"
#include "runtime/kernels/mla_verify_naive/naive.h"
#include "tests/reference/mla_reference.h"

namespace kjit::kernels {
namespace {

class NoKernels : public KernelTable {
 public:
  StatusOr<CUfunction> Function(std::string_view, std::string_view, std::string_view) const override {
    return absl::NotFoundError("no kernels on this machine");
  }
};

MlaVerifyProblem Problem(MaskKind mask) {
  reference::CaseSpec s;
  s.num_heads = 16, s.prefix_lens = {5, 0}, s.draft_lens = {7, 33}, s.mask = mask;
  return reference::MakeCase(s).problem;
}

TEST(OraclePlan, OneBlockPerRowAndHeadAndAnErrorWord) {
  for (MaskKind mask : {MaskKind::kBool, MaskKind::kPacked}) {
    StatusOr<MlaVerifyPlan> plan = PlanMlaVerifyNaive(Problem(mask), driver::DeviceInfo{});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->family, "mla_verify_naive");
    EXPECT_EQ(plan->specialization, mask == MaskKind::kPacked ? "packed" : "bool");
    EXPECT_EQ(plan->main.grid[0], 40u);
    EXPECT_EQ(plan->main.grid[1], 16u);
    EXPECT_EQ(plan->main.block[0], 128u);
    EXPECT_EQ(plan->num_splits, 1);
    EXPECT_GE(plan->workspace_bytes, plan->error_word_offset + sizeof(uint32_t));
  }
}

TEST(OraclePlan, RefusesSizesTheGridCannotHold) {
  MlaVerifyProblem p = Problem(MaskKind::kBool);
  p.num_heads = 0;
  EXPECT_EQ(PlanMlaVerifyNaive(p, {}).status().code(), absl::StatusCode::kInvalidArgument);
  p = Problem(MaskKind::kBool);
  p.num_q = int64_t{1} << 31;
  EXPECT_EQ(PlanMlaVerifyNaive(p, {}).status().code(), absl::StatusCode::kInvalidArgument);
  p = Problem(MaskKind::kBool);
  p.num_slots = -1;
  EXPECT_EQ(PlanMlaVerifyNaive(p, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OraclePlan, LaunchRefusesForeignPlansAndMissingBuffersBeforeTouchingTheDevice) {
  const MlaVerifyProblem p = Problem(MaskKind::kBool);
  StatusOr<MlaVerifyPlan> plan = PlanMlaVerifyNaive(p, {});
  ASSERT_TRUE(plan.ok());
  MlaVerifyBuffers b;
  b.q = b.k_extend = b.kv_cache = b.qo_indptr = b.kv_indptr = b.kv_indices = 0x1000;
  b.mask = b.mask_indptr = b.o = b.lse = b.workspace = 0x1000;
  MlaVerifyPlan foreign = *plan;
  foreign.family = "mla_verify";
  EXPECT_EQ(LaunchMlaVerifyNaive(NoKernels(), foreign, p, b, nullptr).code(), absl::StatusCode::kInvalidArgument);
  MlaVerifyProblem packed = p;
  packed.mask_kind = MaskKind::kPacked;
  EXPECT_EQ(LaunchMlaVerifyNaive(NoKernels(), *plan, packed, b, nullptr).code(), absl::StatusCode::kInvalidArgument);
  MlaVerifyProblem bigger = p;
  bigger.num_q += 1;
  EXPECT_EQ(LaunchMlaVerifyNaive(NoKernels(), *plan, bigger, b, nullptr).code(), absl::StatusCode::kInvalidArgument);
  MlaVerifyBuffers no_ws = b;
  no_ws.workspace = 0;
  EXPECT_EQ(LaunchMlaVerifyNaive(NoKernels(), *plan, p, no_ws, nullptr).code(), absl::StatusCode::kInvalidArgument);
  MlaVerifyBuffers no_o = b;
  no_o.o = 0;
  EXPECT_EQ(LaunchMlaVerifyNaive(NoKernels(), *plan, p, no_o, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(OracleCatalog, OneProgramPerMaskKindFromTheEmbeddedSource) {
  const std::vector<Specialization> specs = FamilySpecializations(kMlaVerifyNaiveFamily);
  ASSERT_EQ(specs.size(), 2u);
  for (MaskKind mask : {MaskKind::kBool, MaskKind::kPacked}) {
    const Specialization& s = specs[mask == MaskKind::kPacked ? 1 : 0];
    EXPECT_EQ(s.name, MlaVerifyNaiveSpecialization(mask));
    ASSERT_EQ(s.name_expressions.size(), 1u);
    EXPECT_EQ(s.name_expressions[0], MlaVerifyNaiveNameExpression(mask));
    EXPECT_TRUE(KernelSource(s.entry_source).ok()) << s.entry_source;
  }
}

}  // namespace
}  // namespace kjit::kernels
