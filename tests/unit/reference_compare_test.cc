// bf16 conversion and the comparison every kernel test relies on: it must catch what it claims to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

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

// fp8 numerics in the order a kernel computes them: the prefix in `splits` chunks of tiles of `tile`
// keys, each chunk with a running max (each weight rounded to e4m3 relative to the max so far), the
// tree as one more chunk with bf16 weights, and the chunks merged at the end; o rounded to bf16.
// One request, chain tree, no padding.
std::vector<uint16_t> RunningMaxFp8(const MlaCase& c, int tile, int splits) {
  const auto& pr = c.problem;
  const int p = c.prefix_len(0), d = c.draft_len(0);
  std::vector<uint16_t> o(static_cast<size_t>(pr.num_q) * pr.num_heads * kernels::kMlaVDim);
  struct State {
    double m = -std::numeric_limits<double>::infinity(), l = 0;
    std::vector<double> acc = std::vector<double>(kernels::kMlaVDim, 0.0);
    void Add(const std::vector<double>& s, const std::vector<const double*>& v, bool e4m3, double v_scale) {
      double nm = m;
      for (double x : s) nm = std::max(nm, x);
      const double rescale = std::isinf(m) ? 0.0 : std::exp(m - nm);
      l *= rescale;
      for (double& a : acc) a *= rescale;
      for (size_t j = 0; j < s.size(); ++j) {
        const double w = std::exp(s[j] - nm);
        l += w;
        const double pv = (e4m3 ? E4m3ToDouble(DoubleToE4m3(w)) : Bf16ToFloat(FloatToBf16(static_cast<float>(w)))) * v_scale;
        for (int i = 0; i < kernels::kMlaVDim; ++i) acc[i] += pv * v[j][i];
      }
      m = nm;
    }
  };
  std::vector<std::vector<double>> keys;  // decoded prefix keys, then the tree keys
  for (int j = 0; j < p; ++j) {
    const uint8_t* k = c.kv_cache_fp8.data() + c.kv_indices[j] * kernels::kMlaKDim;
    keys.emplace_back(k, k + kernels::kMlaKDim);
    for (double& x : keys.back()) x = E4m3ToDouble(static_cast<uint8_t>(x));
  }
  for (int col = 0; col < d; ++col) {
    keys.emplace_back(kernels::kMlaKDim);
    for (int i = 0; i < kernels::kMlaKDim; ++i) keys.back()[i] = Bf16ToFloat(c.k_extend[col * kernels::kMlaKDim + i]);
  }
  auto dot = [](const double* a, const std::vector<double>& b) {
    double s = 0;
    for (int i = 0; i < kernels::kMlaKDim; ++i) s += a[i] * b[i];
    return s;
  };
  for (int r = 0; r < d; ++r) {
    for (int h = 0; h < pr.num_heads; ++h) {
      double q[kernels::kMlaKDim], q8[kernels::kMlaKDim];
      for (int i = 0; i < kernels::kMlaKDim; ++i) {
        q[i] = Bf16ToFloat(c.q[(static_cast<size_t>(r) * pr.num_heads + h) * kernels::kMlaKDim + i]);
        q8[i] = E4m3ToDouble(DoubleToE4m3(q[i]));
      }
      std::vector<State> states(splits + 1);
      const int chunk = (p + splits - 1) / splits;
      for (int sp = 0; sp < splits; ++sp) {
        for (int t = sp * chunk; t < std::min(p, (sp + 1) * chunk); t += tile) {
          std::vector<double> s;
          std::vector<const double*> v;
          for (int j = t; j < std::min({p, t + tile, (sp + 1) * chunk}); ++j) {
            s.push_back(pr.sm_scale * pr.k_scale * dot(q8, keys[j]));
            v.push_back(keys[j].data());
          }
          states[sp].Add(s, v, true, pr.v_scale);
        }
      }
      std::vector<double> s;
      std::vector<const double*> v;
      for (int col = 0; col <= r; ++col) {
        s.push_back(pr.sm_scale * dot(q, keys[p + col]));
        v.push_back(keys[p + col].data());
      }
      states[splits].Add(s, v, false, 1.0);
      double m = -std::numeric_limits<double>::infinity(), l = 0;
      for (const State& st : states) m = std::max(m, st.m);
      std::vector<double> acc(kernels::kMlaVDim, 0.0);
      for (const State& st : states) {
        if (std::isinf(st.m)) continue;
        const double f = std::exp(st.m - m);
        l += st.l * f;
        for (int i = 0; i < kernels::kMlaVDim; ++i) acc[i] += st.acc[i] * f;
      }
      for (int i = 0; i < kernels::kMlaVDim; ++i) {
        o[(static_cast<size_t>(r) * pr.num_heads + h) * kernels::kMlaVDim + i] = FloatToBf16(static_cast<float>(acc[i] / l));
      }
    }
  }
  return o;
}

MlaCase Fp8Case(kernels::Fp8Numerics numerics) {
  CaseSpec s;
  s.seed = 33, s.num_heads = 2, s.prefix_lens = {700}, s.draft_lens = {4}, s.tree = TreeKind::kChain;
  s.kv_dtype = kernels::KvDtype::kFp8E4m3, s.fp8_numerics = numerics;
  return MakeCase(s);
}

std::vector<uint16_t> RoundedToBf16(const std::vector<double>& v) {
  std::vector<uint16_t> o;
  for (double x : v) o.push_back(FloatToBf16(static_cast<float>(x)));
  return o;
}

TEST(ReferenceCompareFp8, AKernelsRunningMaxOrderPassesInEveryTiling) {
  const MlaCase c = Fp8Case(kernels::Fp8Numerics::kFp8);
  const RefOutput want = Reference(c);
  for (auto [tile, splits] : {std::pair{16, 1}, std::pair{64, 1}, std::pair{16, 7}, std::pair{64, 44}}) {
    const Comparison cmp = Compare(c, want, RunningMaxFp8(c, tile, splits));
    EXPECT_TRUE(cmp.ok()) << "tile " << tile << ", " << splits << " splits\n" << cmp.Describe();
    EXPECT_GT(cmp.rel_frobenius, 0) << "the running max should round some weights differently";
    EXPECT_LT(cmp.rel_frobenius, cmp.rel_frobenius_exact) << "nearer its numerics than the exact math";
  }
}

TEST(ReferenceCompareFp8, TheEmulationRoundedToBf16PassesAndReportsTheExactError) {
  const MlaCase c = Fp8Case(kernels::Fp8Numerics::kFp8);
  const RefOutput want = Reference(c);
  const Comparison cmp = Compare(c, want, RoundedToBf16(want.o));
  EXPECT_TRUE(cmp.ok()) << cmp.Describe();
  EXPECT_LT(cmp.rel_frobenius, 3e-3);
  EXPECT_GT(cmp.numerics_rel_frobenius, 0.01) << "q and P in e4m3 are far coarser than bf16";
  EXPECT_GT(cmp.p_rounding_rel_frobenius, 0);
  EXPECT_LT(cmp.p_rounding_rel_frobenius, cmp.numerics_rel_frobenius);
  EXPECT_NEAR(cmp.rel_frobenius_exact, cmp.numerics_rel_frobenius, 3e-3);
  EXPECT_NE(cmp.Describe().find("against the exact math"), std::string::npos) << cmp.Describe();
}

TEST(ReferenceCompareFp8, TheExactMathFailsTheFp8Numerics) {
  const MlaCase c = Fp8Case(kernels::Fp8Numerics::kFp8);
  const RefOutput want = Reference(c);
  const Comparison cmp = Compare(c, want, RoundedToBf16(want.o_exact));
  EXPECT_FALSE(cmp.ok()) << cmp.Describe();
  EXPECT_GT(cmp.rel_frobenius, cmp.max_rel_frob) << "unrounded q must not pass as the fp8 numerics";
  EXPECT_LT(cmp.rel_frobenius_exact, 3e-3);
}

// A kernel on e4m3 MMAs (Tolerance::e4m3_mma_accumulation) may be off in lse by delta =
// accumulation * score_abs and in an element of o by (e^(2 delta) - 1) * o_abs (a few elements
// here: the global limit does not grow); the same outputs fail the fp32 tolerance, and twice that
// lse error fails both.
TEST(ReferenceCompareFp8, E4m3MmaAccumulationWidensLseAndOByTheScoresMagnitude) {
  const MlaCase c = Fp8Case(kernels::Fp8Numerics::kFp8);
  const RefOutput want = Reference(c);
  const Tolerance mma = E4m3MmaTolerance();
  ASSERT_EQ(want.score_abs.size(), want.lse.size());
  std::vector<float> lse_half, lse_over;
  std::vector<double> o_moved = want.o;
  double min_delta = std::numeric_limits<double>::infinity();
  for (size_t li = 0; li < want.lse.size(); ++li) {
    const double delta = mma.e4m3_mma_accumulation * want.score_abs[li];
    ASSERT_GT(want.score_abs[li], 0) << "every row attends prefix keys";
    min_delta = std::min(min_delta, delta);
    lse_half.push_back(static_cast<float>(want.lse[li] + 0.5 * delta));
    lse_over.push_back(static_cast<float>(want.lse[li] + 2 * delta + 2 * mma.lse_atol));
    for (int i = 0; i < kernels::kMlaVDim; ++i) {
      const size_t flat = li * kernels::kMlaVDim + i;
      if (i % 64 == 0) o_moved[flat] += (i % 128 ? 0.5 : -0.5) * std::expm1(2 * delta) * want.o_abs[flat];
    }
  }
  ASSERT_GT(min_delta, 4 * mma.lse_atol) << "the case's scores are too small to tell the tolerances apart";
  const Comparison ok = Compare(c, want, RoundedToBf16(o_moved), lse_half, mma);
  EXPECT_TRUE(ok.ok()) << ok.Describe();
  EXPECT_FALSE(Compare(c, want, RoundedToBf16(o_moved), lse_half).ok()) << "fp32 sums allow no such error";
  EXPECT_FALSE(Compare(c, want, RoundedToBf16(want.o), lse_over, mma).ok()) << "lse past delta";
  // Without fp8 numerics the term is not applied (no score_abs).
  const MlaCase d = Fp8Case(kernels::Fp8Numerics::kDequant);
  EXPECT_TRUE(Reference(d).score_abs.empty());
}

TEST(ReferenceCompareFp8, DequantKeepsTheBf16Bounds) {
  const MlaCase c = Fp8Case(kernels::Fp8Numerics::kDequant);
  const RefOutput want = Reference(c);
  const Comparison perfect = Compare(c, want, RoundedToBf16(want.o));
  EXPECT_TRUE(perfect.ok()) << perfect.Describe();
  EXPECT_EQ(perfect.rel_frobenius_exact, perfect.rel_frobenius);
  EXPECT_EQ(perfect.numerics_rel_frobenius, 0);
  EXPECT_EQ(perfect.max_rel_frob, 4e-3);
  std::vector<double> scaled = want.o;
  for (double& x : scaled) x *= 1.006;
  EXPECT_FALSE(Compare(c, want, RoundedToBf16(scaled)).ok()) << "0.6% everywhere fails the global norm";
}

}  // namespace
}  // namespace kjit::reference
