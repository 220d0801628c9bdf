// e4m3 on the host, the generator's fp8 caches and the float64 reference on them (both numerics).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "tests/reference/mla_reference.h"

namespace kjit::reference {
namespace {

using kernels::Fp8Numerics;
using kernels::kMlaKDim;
using kernels::kMlaVDim;
using kernels::KvDtype;

// Codes 0x00..0x7e by magnitude, written out: 0 and steps of 2^-9 up to 2^-5, the step doubling at
// every power of two from there on.
constexpr double kPositive[127] = {
    /* 0x00 */ 0, 0.001953125, 0.00390625, 0.005859375, 0.0078125, 0.009765625, 0.01171875, 0.013671875,
    /* 0x08 */ 0.015625, 0.017578125, 0.01953125, 0.021484375, 0.0234375, 0.025390625, 0.02734375, 0.029296875,
    /* 0x10 */ 0.03125, 0.03515625, 0.0390625, 0.04296875, 0.046875, 0.05078125, 0.0546875, 0.05859375,
    /* 0x18 */ 0.0625, 0.0703125, 0.078125, 0.0859375, 0.09375, 0.1015625, 0.109375, 0.1171875,
    /* 0x20 */ 0.125, 0.140625, 0.15625, 0.171875, 0.1875, 0.203125, 0.21875, 0.234375,
    /* 0x28 */ 0.25, 0.28125, 0.3125, 0.34375, 0.375, 0.40625, 0.4375, 0.46875,
    /* 0x30 */ 0.5, 0.5625, 0.625, 0.6875, 0.75, 0.8125, 0.875, 0.9375,
    /* 0x38 */ 1, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
    /* 0x40 */ 2, 2.25, 2.5, 2.75, 3, 3.25, 3.5, 3.75,
    /* 0x48 */ 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5,
    /* 0x50 */ 8, 9, 10, 11, 12, 13, 14, 15,
    /* 0x58 */ 16, 18, 20, 22, 24, 26, 28, 30,
    /* 0x60 */ 32, 36, 40, 44, 48, 52, 56, 60,
    /* 0x68 */ 64, 72, 80, 88, 96, 104, 112, 120,
    /* 0x70 */ 128, 144, 160, 176, 192, 208, 224, 240,
    /* 0x78 */ 256, 288, 320, 352, 384, 416, 448,
};

TEST(ReferenceE4m3, DecodesEveryByteAsTheTableSays) {
  for (int b = 0; b < 0x7f; ++b) {
    EXPECT_EQ(E4m3ToDouble(static_cast<uint8_t>(b)), kPositive[b]) << "byte " << b;
    EXPECT_EQ(E4m3ToDouble(static_cast<uint8_t>(b | 0x80)), -kPositive[b]) << "byte " << (b | 0x80);
  }
  EXPECT_TRUE(std::signbit(E4m3ToDouble(0x80))) << "0x80 is -0";
  EXPECT_FALSE(std::signbit(E4m3ToDouble(0x00)));
  EXPECT_TRUE(std::isnan(E4m3ToDouble(0x7f)));
  EXPECT_TRUE(std::isnan(E4m3ToDouble(0xff)));
}

TEST(ReferenceE4m3, EveryFiniteCodeRoundTrips) {
  std::set<uint8_t> seen;
  for (int i = 0; i < 254; ++i) {
    const uint8_t code = FiniteE4m3Code(i);
    seen.insert(code);
    ASSERT_FALSE(std::isnan(E4m3ToDouble(code))) << "code " << int{code};
    EXPECT_EQ(DoubleToE4m3(E4m3ToDouble(code)), code) << "code " << int{code};
  }
  EXPECT_EQ(seen.size(), 254u);
  EXPECT_EQ(seen.count(0x7f) + seen.count(0xff), 0u);
}

TEST(ReferenceE4m3, RoundsToNearestTiesToEven) {
  for (int k = 0; k + 1 < 127; ++k) {  // between every two neighbours, both signs
    const double lo = kPositive[k], hi = kPositive[k + 1], mid = 0.5 * (lo + hi), gap = hi - lo;
    const uint8_t even = static_cast<uint8_t>(k % 2 == 0 ? k : k + 1);
    EXPECT_EQ(DoubleToE4m3(mid), even) << "tie between codes " << k << " and " << k + 1;
    EXPECT_EQ(DoubleToE4m3(-mid), even | 0x80) << "tie between codes -" << k << " and -" << k + 1;
    EXPECT_EQ(DoubleToE4m3(mid - gap * 1e-6), k) << "just below the tie after code " << k;
    EXPECT_EQ(DoubleToE4m3(mid + gap * 1e-6), k + 1) << "just above the tie after code " << k;
  }
  EXPECT_EQ(DoubleToE4m3(1.0625), 0x38);       // 1 + 1/16: tie, 1.0 is even
  EXPECT_EQ(DoubleToE4m3(1.1875), 0x3a);       // 1.125 + 1/16: tie, 1.25 is even
  EXPECT_EQ(DoubleToE4m3(0x1p-10), 0x00);      // half the smallest subnormal: to zero
  EXPECT_EQ(DoubleToE4m3(-0x1p-10), 0x80);     // a zero of the value's sign
  EXPECT_EQ(DoubleToE4m3(0x1.0001p-10), 0x01);
  EXPECT_EQ(DoubleToE4m3(3 * 0x1p-10), 0x02);  // tie between 2^-9 and 2^-8
  EXPECT_EQ(DoubleToE4m3(7.5 * 0x1p-9), 0x08);  // tie between 7 and 8 quanta: the smallest normal
  EXPECT_EQ(DoubleToE4m3(1e-30), 0x00);
}

TEST(ReferenceE4m3, SaturatesAtPlusMinus448) {
  EXPECT_EQ(DoubleToE4m3(448.0), 0x7e);
  EXPECT_EQ(DoubleToE4m3(464.0), 0x7e);  // the tie with the next (non-existent) value
  EXPECT_EQ(DoubleToE4m3(479.0), 0x7e);
  EXPECT_EQ(DoubleToE4m3(1e30), 0x7e);
  EXPECT_EQ(DoubleToE4m3(-1e30), 0xfe);
  EXPECT_EQ(DoubleToE4m3(std::numeric_limits<double>::infinity()), 0x7e);
  EXPECT_EQ(DoubleToE4m3(-std::numeric_limits<double>::infinity()), 0xfe);
  EXPECT_TRUE(std::isnan(E4m3ToDouble(DoubleToE4m3(std::nan("")))));
}

TEST(ReferenceE4m3, RoundingErrorStaysWithinItsBound) {
  std::mt19937_64 rng(8);
  for (int i = 0; i < 200000; ++i) {
    const double a = std::ldexp(1.0 + static_cast<double>(rng() >> 11) * 0x1p-53, static_cast<int>(rng() % 24) - 15);
    if (a > 448) continue;
    const double err = std::fabs(E4m3ToDouble(DoubleToE4m3(a)) - a);
    ASSERT_LE(err, E4m3RoundingErrorBound(a)) << "a = " << a;
  }
  // Attained: a flushed value, a subnormal tie, a normal tie.
  EXPECT_EQ(E4m3RoundingErrorBound(0x1p-11), 0x1p-11);
  EXPECT_EQ(std::fabs(E4m3ToDouble(DoubleToE4m3(3 * 0x1p-10)) - 3 * 0x1p-10), E4m3RoundingErrorBound(3 * 0x1p-10));
  EXPECT_EQ(std::fabs(E4m3ToDouble(DoubleToE4m3(1.0625)) - 1.0625), 0x1p-4);
}

CaseSpec Fp8Spec(uint64_t seed, Fp8Numerics numerics) {
  CaseSpec s;
  s.seed = seed, s.num_heads = 2, s.prefix_lens = {300, 5}, s.draft_lens = {3, 2}, s.padded_requests = 1;
  s.tree = TreeKind::kBushy, s.kv_dtype = KvDtype::kFp8E4m3, s.fp8_numerics = numerics;
  return s;
}

TEST(ReferenceFp8Case, CacheIsTheE4m3RoundingOfTheBf16CaseWithRandomCodes) {
  const CaseSpec s = Fp8Spec(12, Fp8Numerics::kFp8);
  CaseSpec bf16_spec = s;
  bf16_spec.kv_dtype = KvDtype::kBf16;
  const MlaCase c = MakeCase(s), b = MakeCase(bf16_spec);
  EXPECT_EQ(c.problem.kv_dtype, KvDtype::kFp8E4m3);
  EXPECT_EQ(c.problem.fp8_numerics, Fp8Numerics::kFp8);
  EXPECT_TRUE(c.kv_cache.empty());
  ASSERT_EQ(c.kv_cache_fp8.size(), static_cast<size_t>(c.problem.num_slots) * kMlaKDim);
  EXPECT_EQ(c.q, b.q);
  EXPECT_EQ(c.k_extend, b.k_extend);
  EXPECT_EQ(c.kv_indices, b.kv_indices);
  EXPECT_EQ(c.mask_bool, b.mask_bool);
  std::set<int64_t> read(c.kv_indices.begin(), c.kv_indices.begin() + c.kv_indptr[2]);
  int64_t same = 0, total = 0, subnormal = 0, neg_zero = 0, extremes = 0;
  for (int64_t slot = 0; slot < c.problem.num_slots; ++slot) {
    for (int e = 0; e < kMlaKDim; ++e) {
      const uint8_t code = c.kv_cache_fp8[slot * kMlaKDim + e];
      ASSERT_NE(code & 0x7f, 0x7f) << "NaN byte at slot " << slot;
      if (!read.count(slot)) {
        extremes += code == 0x7e || code == 0xfe;
        continue;
      }
      ++total;
      const double v = E4m3ToDouble(code);
      same += code == DoubleToE4m3(Bf16ToFloat(b.kv_cache[slot * kMlaKDim + e]));
      ASSERT_LT(std::fabs(v), 16.0) << "slot " << slot << " dim " << e;
      subnormal += (code & 0x78) == 0 && (code & 7) != 0;
      neg_zero += code == 0x80;
    }
  }
  EXPECT_GT(same, total * 97 / 100);
  EXPECT_LT(same, total) << "no random codes in the read slots";
  EXPECT_GT(subnormal, 100);
  EXPECT_GT(neg_zero, 0);
  EXPECT_GT(extremes, 0) << "slot 0 and the unread slots should hold +-448 somewhere";
}

TEST(ReferenceFp8Case, EveryCodeIsWrittenIntoEveryKey) {
  MlaCase c = MakeCase(Fp8Spec(13, Fp8Numerics::kDequant));
  WriteEveryE4m3Code(c, 0, kMlaKDim);
  for (int64_t j = 0; j < c.kv_indptr[2]; ++j) {
    std::set<uint8_t> codes(c.kv_cache_fp8.begin() + c.kv_indices[j] * kMlaKDim,
                            c.kv_cache_fp8.begin() + (c.kv_indices[j] + 1) * kMlaKDim);
    ASSERT_EQ(codes.size(), 254u) << "key " << j;
  }
}

// The dequant reference is the bf16 reference on the decoded values (every e4m3 value is a bf16).
MlaCase AsBf16Cache(const MlaCase& fp8) {
  MlaCase c = fp8;
  c.problem.kv_dtype = KvDtype::kBf16;
  for (uint8_t code : fp8.kv_cache_fp8) c.kv_cache.push_back(FloatToBf16(static_cast<float>(E4m3ToDouble(code))));
  c.kv_cache_fp8.clear();
  return c;
}

TEST(ReferenceFp8, DequantIsTheBf16MathOnTheDecodedValues) {
  MlaCase c = MakeCase(Fp8Spec(14, Fp8Numerics::kDequant));
  c.problem.k_scale = 0.5f, c.problem.v_scale = 2.0f;
  const RefOutput fp8 = Reference(c), bf16 = Reference(AsBf16Cache(c));
  EXPECT_EQ(fp8.o, bf16.o);
  EXPECT_EQ(fp8.lse, bf16.lse);
  EXPECT_EQ(fp8.o_abs, bf16.o_abs);
  EXPECT_TRUE(fp8.o_exact.empty() && fp8.o_abs_fp8.empty());
  c.problem.fp8_numerics = Fp8Numerics::kFp8;
  const RefOutput emulated = Reference(c);
  EXPECT_EQ(emulated.o_exact, fp8.o) << "o_exact must be the dequant reference";
  EXPECT_NE(emulated.o, fp8.o);
}

TEST(ReferenceFp8, OneKeyOutputsEveryDecodedValueScaledInBothNumerics) {
  for (Fp8Numerics numerics : {Fp8Numerics::kDequant, Fp8Numerics::kFp8}) {
    CaseSpec s;
    s.seed = 15, s.num_heads = 1, s.prefix_lens = {1}, s.draft_lens = {1}, s.tree = TreeKind::kRandom;
    s.kv_dtype = KvDtype::kFp8E4m3, s.fp8_numerics = numerics, s.v_scale = 2.0f;
    MlaCase c = MakeCase(s);
    c.mask_bool.assign(c.mask_bool.size(), 0);  // only the prefix key
    PackMaskFromBool(c);
    WriteEveryE4m3Code(c, 0, kMlaKDim);
    const RefOutput out = Reference(c);
    const uint8_t* v = c.kv_cache_fp8.data() + c.kv_indices[0] * kMlaKDim;
    for (int d = 0; d < kMlaVDim; ++d) {
      ASSERT_EQ(out.o[d], 2.0 * E4m3ToDouble(v[d])) << "numerics " << static_cast<int>(numerics) << " dim " << d;
    }
  }
}

double Dot(const double* q, const uint16_t* k_bf16, const uint8_t* k_fp8) {
  double s = 0;
  for (int i = 0; i < kMlaKDim; ++i) s += q[i] * (k_fp8 ? E4m3ToDouble(k_fp8[i]) : Bf16ToFloat(k_bf16[i]));
  return s;
}

// Two prefix keys and the row's own draft token, computed here term by term.
TEST(ReferenceFp8, Fp8NumericsRoundQAndPrefixWeightsOnly) {
  CaseSpec s;
  s.seed = 16, s.num_heads = 1, s.prefix_lens = {2}, s.draft_lens = {1}, s.tree = TreeKind::kChain;
  s.kv_dtype = KvDtype::kFp8E4m3, s.fp8_numerics = Fp8Numerics::kFp8, s.k_scale = 0.5f, s.v_scale = 2.0f;
  const MlaCase c = MakeCase(s);
  double q[kMlaKDim], q8[kMlaKDim];
  for (int i = 0; i < kMlaKDim; ++i) q[i] = Bf16ToFloat(c.q[i]), q8[i] = E4m3ToDouble(DoubleToE4m3(q[i]));
  const uint8_t* k0 = c.kv_cache_fp8.data() + c.kv_indices[0] * kMlaKDim;
  const uint8_t* k1 = c.kv_cache_fp8.data() + c.kv_indices[1] * kMlaKDim;
  const double sm = c.problem.sm_scale;
  const double s0 = sm * 0.5 * Dot(q8, nullptr, k0), s1 = sm * 0.5 * Dot(q8, nullptr, k1);
  const double st = sm * Dot(q, c.k_extend.data(), nullptr);
  const double m = std::max({s0, s1, st});
  const double p0 = std::exp(s0 - m), p1 = std::exp(s1 - m), pt = std::exp(st - m), l = p0 + p1 + pt;
  const double r0 = E4m3ToDouble(DoubleToE4m3(p0)), r1 = E4m3ToDouble(DoubleToE4m3(p1));
  ASSERT_TRUE(r0 != p0 || r1 != p1) << "pick another seed: no weight changed by rounding";
  const RefOutput out = Reference(c);
  for (int d = 0; d < kMlaVDim; ++d) {
    const double want = (2.0 * (r0 * E4m3ToDouble(k0[d]) + r1 * E4m3ToDouble(k1[d])) +
                         pt * Bf16ToFloat(c.k_extend[d])) / l;
    ASSERT_NEAR(out.o[d], want, 1e-12) << "dim " << d;
    const double bound = 2.0 * (E4m3RoundingErrorBound(p0) * std::fabs(E4m3ToDouble(k0[d])) +
                                E4m3RoundingErrorBound(p1) * std::fabs(E4m3ToDouble(k1[d]))) / l;
    ASSERT_NEAR(out.o_abs_fp8[d], bound, 1e-12) << "dim " << d;
  }
  EXPECT_NEAR(out.lse[0], m + std::log(l), 1e-12);
}

// A weight below 2^-10 of the row max is flushed from P.V but still counts in the row sum.
TEST(ReferenceFp8, WeightsBelowTwoToTheMinusTenAreFlushedFromTheValuesOnly) {
  CaseSpec s;
  s.seed = 17, s.num_heads = 1, s.prefix_lens = {2}, s.draft_lens = {1}, s.scattered = false;
  s.kv_dtype = KvDtype::kFp8E4m3, s.fp8_numerics = Fp8Numerics::kFp8;
  MlaCase c = MakeCase(s);
  c.mask_bool.assign(c.mask_bool.size(), 0);
  PackMaskFromBool(c);
  for (int i = 0; i < kMlaKDim; ++i) c.q[i] = FloatToBf16(i == kMlaVDim ? 1.f : 0.f);  // scores from dim 512
  uint8_t* k0 = c.kv_cache_fp8.data() + c.kv_indices[0] * kMlaKDim;
  uint8_t* k1 = c.kv_cache_fp8.data() + c.kv_indices[1] * kMlaKDim;
  k0[kMlaVDim] = 0x00;  // s0 = 0
  k1[kMlaVDim] = 0xe5;  // -52: s1 = -52 sm = -7.52, p1 = 5.4e-4 < 2^-10
  const double p1 = std::exp(-52.0 * c.problem.sm_scale);
  ASSERT_LT(p1, 0x1p-10);
  const RefOutput out = Reference(c);
  for (int d = 0; d < kMlaVDim; ++d) {
    ASSERT_NEAR(out.o[d], E4m3ToDouble(k0[d]) / (1 + p1), 1e-13) << "dim " << d;
    ASSERT_NEAR(out.o_exact[d], (E4m3ToDouble(k0[d]) + p1 * E4m3ToDouble(k1[d])) / (1 + p1), 1e-13) << d;
  }
  EXPECT_NEAR(out.lse[0], std::log(1 + p1), 1e-13);
}

}  // namespace
}  // namespace kjit::reference
