// bf16 conversion and the comparison every kernel test relies on: it must catch what it claims to.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/reference/mla_reference.h"

namespace kjit::reference {
namespace {

TEST(ReferenceBf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);        // halfway, even below
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);    // halfway, even above
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToFloat(0x3fc0), 1.5f);
  for (uint32_t bits = 0; bits < 0x10000; bits += 7) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), bits) << "bf16 values must round-trip";
    }
  }
}

struct Fixture {
  MlaCase c;
  RefOutput want;
  std::vector<uint16_t> o;
  std::vector<float> lse;
};

// What a perfect kernel returns: the reference rounded to bf16 / fp32.
Fixture Perfect() {
  CaseSpec s;
  s.seed = 31, s.num_heads = 2, s.prefix_lens = {40, 0}, s.draft_lens = {5, 4}, s.tree = TreeKind::kRandom;
  s.padded_requests = 1, s.padded_draft = 2;
  Fixture f{MakeCase(s), {}, {}, {}};
  f.want = Reference(f.c);
  for (double v : f.want.o) f.o.push_back(FloatToBf16(static_cast<float>(v)));
  for (double v : f.want.lse) f.lse.push_back(static_cast<float>(v));
  return f;
}

TEST(ReferenceCompare, PerfectlyRoundedOutputPasses) {
  const Fixture f = Perfect();
  const Comparison cmp = Compare(f.c, f.want, f.o, f.lse);
  EXPECT_TRUE(cmp.ok()) << cmp.Describe();
  EXPECT_LT(cmp.rel_frobenius, 3e-3);
  EXPECT_EQ(cmp.compared, (9) * 2 * 512) << "padded rows must be excluded";
}

TEST(ReferenceCompare, OneWrongElementIsFoundAndNamed) {
  Fixture f = Perfect();
  const int64_t at = (3 * 2 + 1) * 512 + 100;  // row 3, head 1, dim 100
  f.o[at] = FloatToBf16(static_cast<float>(f.want.o[at] + 0.05 + 0.05 * std::fabs(f.want.o[at])));
  const Comparison cmp = Compare(f.c, f.want, f.o, f.lse);
  EXPECT_FALSE(cmp.ok());
  EXPECT_EQ(cmp.bad_elements, 1);
  EXPECT_EQ(cmp.worst_index, at);
  EXPECT_NE(cmp.Describe().find("row 3, head 1, dim 100"), std::string::npos) << cmp.Describe();
}

TEST(ReferenceCompare, NanInARealRowFailsButInAPaddedRowIsIgnored) {
  Fixture f = Perfect();
  const uint16_t nan = 0x7fc0;
  f.o[(9 * 2) * 512 + 3] = nan;  // row 9 is padding
  f.lse[9 * 2] = std::nanf("");
  EXPECT_TRUE(Compare(f.c, f.want, f.o, f.lse).ok());
  f.o[5] = nan;
  const Comparison cmp = Compare(f.c, f.want, f.o, f.lse);
  EXPECT_EQ(cmp.nan_count, 1);
  EXPECT_FALSE(cmp.ok());
}

TEST(ReferenceCompare, SmallErrorsEverywhereFailTheGlobalNorm) {
  Fixture f = Perfect();
  for (size_t i = 0; i < f.o.size(); ++i) f.o[i] = FloatToBf16(static_cast<float>(f.want.o[i] * 1.006));
  const Comparison cmp = Compare(f.c, f.want, f.o, f.lse);
  EXPECT_EQ(cmp.bad_elements, 0) << "0.6% is inside every per-element bound";
  EXPECT_GT(cmp.rel_frobenius, 4e-3);
  EXPECT_FALSE(cmp.ok());
}

TEST(ReferenceCompare, LseMustBeMinusInfExactlyForEmptyRows) {
  Fixture f = Perfect();
  int64_t empty = -1;
  for (size_t i = 0; i < f.want.lse.size() && empty < 0; ++i) {
    if (std::isinf(f.want.lse[i]) && !f.c.row_is_padding[i / 2]) empty = static_cast<int64_t>(i);
  }
  ASSERT_GE(empty, 0) << "the fixture should have an empty row (random tree, no prefix)";
  f.lse[empty] = -1e30f;
  EXPECT_EQ(Compare(f.c, f.want, f.o, f.lse).lse_bad, 1);
  f.lse[empty] = -std::numeric_limits<float>::infinity();
  f.lse[0] += 0.01f;
  EXPECT_EQ(Compare(f.c, f.want, f.o, f.lse).lse_bad, 1);
}

TEST(ReferenceCompare, TheBoundFollowsTheValueMagnitudeNotJustTheOutput) {
  // A long prefix averages many values: o is small but P's rounding error scales with o_abs.
  CaseSpec s;
  s.seed = 2, s.num_heads = 1, s.prefix_lens = {600}, s.draft_lens = {1};
  const MlaCase c = MakeCase(s);
  const RefOutput want = Reference(c);
  double ratio = 0;
  for (size_t i = 0; i < want.o.size(); ++i) ratio = std::max(ratio, want.o_abs[i] / (std::fabs(want.o[i]) + 1e-30));
  EXPECT_GT(ratio, 5.0);
  for (size_t i = 0; i < want.o.size(); ++i) EXPECT_GE(want.o_abs[i], std::fabs(want.o[i]) * (1 - 1e-12));
}

}  // namespace
}  // namespace kjit::reference
