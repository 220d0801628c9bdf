// The float64 reference on cases small enough to compute by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/reference/mla_reference.h"

namespace kjit::reference {
namespace {

using kernels::kMlaKDim;
using kernels::kMlaVDim;
using kernels::MaskKind;

// One request, one head, contiguous slots, chain tree; values from the generator.
MlaCase Tiny(int prefix, int draft, uint64_t seed = 7) {
  CaseSpec s;
  s.seed = seed;
  s.num_heads = 1;
  s.prefix_lens = {prefix};
  s.draft_lens = {draft};
  s.scattered = false;
  s.tree = TreeKind::kChain;
  return MakeCase(s);
}

void SetTreeBit(MlaCase& c, int b, int r, int col, bool on) {
  const int p = c.prefix_len(b), d = c.draft_len(b);
  c.mask_bool[c.mask_indptr[b] + static_cast<int64_t>(r) * (p + d) + p + col] = on ? 1 : 0;
  PackMaskFromBool(c);
}

double Dot(const uint16_t* a, const uint16_t* b) {
  double s = 0;
  for (int i = 0; i < kMlaKDim; ++i) s += static_cast<double>(Bf16ToFloat(a[i])) * Bf16ToFloat(b[i]);
  return s;
}

TEST(ReferenceHand, OneKeyOutputsItsValueRow) {
  MlaCase c = Tiny(1, 1);
  SetTreeBit(c, 0, 0, 0, false);  // only the prefix key remains
  const RefOutput out = Reference(c);
  const uint16_t* k = c.kv_cache.data() + c.kv_indices[0] * kMlaKDim;
  for (int d = 0; d < kMlaVDim; ++d) ASSERT_EQ(out.o[d], Bf16ToFloat(k[d])) << "dim " << d;
  EXPECT_NEAR(out.lse[0], static_cast<double>(c.problem.sm_scale) * Dot(c.q.data(), k), 1e-12);
}

TEST(ReferenceHand, TwoKeysWithEqualScoresGiveTheMeanOfTheirValues) {
  MlaCase c = Tiny(2, 1);
  SetTreeBit(c, 0, 0, 0, false);
  for (int i = 0; i < kMlaVDim; ++i) c.q[i] = FloatToBf16(0.f);  // scores from the rope dims only
  uint16_t* k0 = c.kv_cache.data() + c.kv_indices[0] * kMlaKDim;
  uint16_t* k1 = c.kv_cache.data() + c.kv_indices[1] * kMlaKDim;
  for (int i = kMlaVDim; i < kMlaKDim; ++i) k1[i] = k0[i];  // equal keys where q is nonzero
  const RefOutput out = Reference(c);
  for (int d = 0; d < kMlaVDim; ++d) {
    ASSERT_NEAR(out.o[d], 0.5 * (Bf16ToFloat(k0[d]) + Bf16ToFloat(k1[d])), 1e-15) << "dim " << d;
  }
  EXPECT_NEAR(out.lse[0], c.problem.sm_scale * Dot(c.q.data(), k0) + std::log(2.0), 1e-12);
}

TEST(ReferenceHand, RowWithNothingToAttendIsZeroWithMinusInfLse) {
  MlaCase c = Tiny(0, 3);
  for (int r = 0; r < 3; ++r)
    for (int col = 0; col < 3; ++col) SetTreeBit(c, 0, r, col, r == 2 && col == 1);
  const RefOutput out = Reference(c);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out.lse[r], -std::numeric_limits<double>::infinity()) << "row " << r;
    for (int d = 0; d < kMlaVDim; ++d) ASSERT_EQ(out.o[r * kMlaVDim + d], 0.0) << "row " << r << " dim " << d;
  }
  // Row 2 attends only to draft token 1: its output is that token's value row.
  for (int d = 0; d < kMlaVDim; ++d) {
    ASSERT_EQ(out.o[2 * kMlaVDim + d], Bf16ToFloat(c.k_extend[1 * kMlaKDim + d])) << "dim " << d;
  }
}

TEST(ReferenceHand, KScaleOnPrefixScoresAndVScaleOnPrefixValuesOnly) {
  MlaCase c = Tiny(1, 1);  // one prefix key and the token itself
  c.problem.k_scale = 0.5f;
  c.problem.v_scale = 2.0f;
  const uint16_t* kp = c.kv_cache.data() + c.kv_indices[0] * kMlaKDim;
  const uint16_t* kt = c.k_extend.data();
  const double sm = c.problem.sm_scale;
  const double s_pre = sm * 0.5 * Dot(c.q.data(), kp), s_tree = sm * Dot(c.q.data(), kt);
  const double m = std::max(s_pre, s_tree), w_pre = std::exp(s_pre - m), w_tree = std::exp(s_tree - m);
  const RefOutput out = Reference(c);
  for (int d = 0; d < kMlaVDim; ++d) {
    const double want = (w_pre * 2.0 * Bf16ToFloat(kp[d]) + w_tree * Bf16ToFloat(kt[d])) / (w_pre + w_tree);
    ASSERT_NEAR(out.o[d], want, 1e-12) << "dim " << d;
  }
  EXPECT_NEAR(out.lse[0], m + std::log(w_pre + w_tree), 1e-12);
  c.problem.k_scale = 1.f;
  c.problem.v_scale = 1.f;
  EXPECT_NE(Reference(c).o[0], out.o[0]) << "scales had no effect";
}

TEST(ReferenceHand, CausalIgnoresBitsAboveTheDiagonal) {
  CaseSpec s;
  s.seed = 11, s.num_heads = 2, s.prefix_lens = {3}, s.draft_lens = {8}, s.tree = TreeKind::kChain;
  MlaCase lower = MakeCase(s);
  MlaCase full = lower;
  for (int r = 0; r < 8; ++r)
    for (int col = r + 1; col < 8; ++col) SetTreeBit(full, 0, r, col, true);
  EXPECT_EQ(Reference(lower).o, Reference(full).o);
  lower.problem.is_causal = full.problem.is_causal = false;
  EXPECT_NE(Reference(lower).o, Reference(full).o) << "non-causal must read the upper bits";
}

TEST(ReferenceHand, BoolAndPackedMasksGiveTheSameOutput) {
  for (int d : {1, 7, 33, 64}) {
    CaseSpec s;
    s.seed = 20 + d, s.num_heads = 2, s.prefix_lens = {5, 0}, s.draft_lens = {d, 3}, s.tree = TreeKind::kRandom;
    s.is_causal = false;
    MlaCase c = MakeCase(s);
    const RefOutput as_bool = Reference(c);
    c.problem.mask_kind = MaskKind::kPacked;
    const RefOutput as_packed = Reference(c);
    EXPECT_EQ(as_bool.o, as_packed.o) << "D " << d;
    EXPECT_EQ(as_bool.lse, as_packed.lse) << "D " << d;
    c.mask_packed[0] ^= 1u;  // row 0, column 0 of request 0
    EXPECT_NE(Reference(c).o, as_packed.o) << "D " << d << ": packed bits are not read";
  }
}

TEST(ReferenceHand, OutOfRangeSlotIsTreatedAsMasked) {
  for (int64_t bad : {int64_t{-1}, int64_t{0}}) {
    MlaCase c = Tiny(2, 1);
    SetTreeBit(c, 0, 0, 0, false);
    c.kv_indices[1] = bad < 0 ? bad : c.problem.num_slots;  // S itself is one past the end
    const RefOutput out = Reference(c);
    const uint16_t* k0 = c.kv_cache.data() + c.kv_indices[0] * kMlaKDim;
    for (int d = 0; d < kMlaVDim; ++d) ASSERT_EQ(out.o[d], Bf16ToFloat(k0[d])) << "dim " << d;
  }
}

}  // namespace
}  // namespace kjit::reference
