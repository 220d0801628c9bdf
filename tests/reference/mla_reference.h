// Float64 CPU reference of the MLA tree-verify contract (shared/design KERNEL.md), the generator of
// its test inputs, and the comparison every kernel test uses. Host-only; no CUDA calls.
//
// Contract details fixed here (the kernels follow them):
// - Scores: s_j = sm_scale * k_scale * <q, K_j> on prefix rows, s_c = sm_scale * <q, k_ext_c> on
//   tree rows; V is the first 512 dims of the same row; prefix V rows are multiplied by v_scale.
// - Tree column c of draft row r is attended when its mask bit is set and (!is_causal or c <= r).
//   A bool mask byte is "set" when it is nonzero. Packed: word c / 32, bit c % 32 (LSB first).
// - A kv_indices entry >= S (or < 0) is never read: the slot is treated as masked.
// - A row with nothing to attend: o = 0 and lse = -inf (the convention of the cascade merges in
//   SGLang and vLLM: -inf means "empty state", so merging it with anything leaves the other side).
// - lse is the natural-log log-sum-exp of the scaled scores (not log2).
// - An fp8 e4m3 cache (problem.kv_dtype kFp8E4m3) is read exactly (E4m3ToDouble). With numerics
//   kDequant the math is the bf16 cache's on those values. With kFp8 (SGLang's Triton numerics) the
//   prefix keys see q rounded to e4m3, and the prefix weights p_j = exp(s_j - m) (m the row max) are
//   rounded to e4m3 before P.V while the row sum l adds the unrounded p_j; tree keys are as with bf16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels/mla_verify/args.h"

namespace kjit::reference {

enum class TreeKind : int {
  kChain = 0,   // row r attends to draft tokens 0..r
  kBushy = 1,   // node r > 0 has a random parent among 0..r-1; attends to its ancestors and itself
  kRandom = 2,  // every bit random (also above the diagonal and on it): tests is_causal, empty rows
};

struct CaseSpec {
  uint64_t seed = 1;
  int num_heads = 8;
  std::vector<int> prefix_lens;  // P_b of the real requests
  std::vector<int> draft_lens;   // D_b of the real requests (same length as prefix_lens)
  bool scattered = true;         // kv_indices a random permutation of slots (else 1, 2, 3, ...)
  TreeKind tree = TreeKind::kRandom;
  kernels::MaskKind mask = kernels::MaskKind::kBool;
  bool is_causal = true;
  int padded_requests = 0;  // extra requests appended with P = 1 (slot 0) and stale mask bytes
  int padded_draft = 1;     // D of each padded request
  bool write_lse = true;
  float sm_scale = 0.14467963f;
  float k_scale = 1.f;
  float v_scale = 1.f;
  int64_t extra_slots = 7;  // unused kv_cache rows beyond slot 0 and the prefixes
  kernels::KvDtype kv_dtype = kernels::KvDtype::kBf16;
  kernels::Fp8Numerics fp8_numerics = kernels::Fp8Numerics::kDequant;  // with an fp8 cache
};

// Host copies of every input exactly as laid out in device memory (KERNEL.md's interface table).
struct MlaCase {
  CaseSpec spec;
  kernels::MlaVerifyProblem problem;
  std::vector<uint16_t> q;         // [N, H, 576] bf16 bits, N(0,1) rounded to bf16
  std::vector<uint16_t> k_extend;  // [N, 1, 576]
  std::vector<uint16_t> kv_cache;  // [S, 1, 576] bf16; slot 0 is the dummy slot; empty with an fp8 cache
  // [S, 1, 576] e4m3 bytes, with kv_dtype kFp8E4m3 only (else empty). Slots the real requests read:
  // the e4m3 rounding of the bf16 cache the same spec would have (N(0,1) values), with one byte in
  // 64 replaced by a random code of magnitude < 16 (subnormals and zeros of both signs included).
  // Slot 0 and the unread slots: random codes over every finite value (+-448 included). Never NaN.
  std::vector<uint8_t> kv_cache_fp8;
  std::vector<int32_t> qo_indptr, kv_indptr;  // [B + 1]; kv_indptr counts the prefix only
  std::vector<int64_t> kv_indices;            // [kv_indptr[B]]
  std::vector<int64_t> mask_indptr;           // [B + 1] cumsum(D_b * (P_b + D_b))
  std::vector<uint8_t> mask_bool;             // [mask_indptr[B]]
  std::vector<uint32_t> mask_packed;          // [sum D_b * ceil(D_b / 32)]
  std::vector<bool> row_is_padding;           // [N]; rows of padded requests (outputs ignored)

  int batch() const { return problem.batch; }
  int prefix_len(int b) const { return kv_indptr[b + 1] - kv_indptr[b]; }
  int draft_len(int b) const { return qo_indptr[b + 1] - qo_indptr[b]; }
};

// Deterministic in the spec (std::mt19937_64 seeded from spec.seed). Both mask vectors are filled
// and agree on every real request; spec.mask selects the one problem.mask_kind names.
MlaCase MakeCase(const CaseSpec& spec);

// Recomputes mask_packed from mask_bool (same tree); padded rows copy their stale bytes' nonzero-ness.
void PackMaskFromBool(MlaCase& c);

// For a case with an fp8 cache: rewrites dims [first_dim, end_dim) of every prefix key of the real
// requests so that key i (counted over the real requests' kv_indices in order) holds, at dim d, the
// finite code number (i + d) % 254 (FiniteE4m3Code). 254 or more consecutive dims give every key
// every finite value; 254 or more keys give every dim every finite value.
void WriteEveryE4m3Code(MlaCase& c, int first_dim, int end_dim);

struct RefOutput {
  std::vector<double> o;    // [N, H, 512]; with fp8 numerics, their emulation
  std::vector<double> lse;  // [N, H]; -inf for an empty row
  // [N, H, 512]: sum_j p_j |V_j[d]| / l (v_scale included): the scale of the error that rounding P to
  // bf16 can cause in o[d]; Compare's per-element bound uses it.
  std::vector<double> o_abs;
  // With fp8 numerics only (else empty), each [N, H, 512]:
  //   o_exact: the exact math on the same inputs (q and P unrounded, = the kDequant reference);
  //   o_unrounded_p: q rounded to e4m3 as the numerics do, P not rounded (o - o_unrounded_p is what
  //     rounding P to e4m3 did);
  //   o_abs_fp8: sum over prefix keys j of E4m3RoundingErrorBound(p_j) |V_j[d]| v_scale / l: how far
  //     rounding the prefix weights to e4m3 can move o[d].
  std::vector<double> o_exact, o_unrounded_p, o_abs_fp8;
  //   score_abs: [N, H], the largest over the row's prefix keys j of k_scale * sm_scale *
  //     sum_i |q8_i K_j[i]|: the magnitude that e4m3 MMAs' accumulation errs relative to
  //     (Tolerance::e4m3_mma_accumulation).
  std::vector<double> score_abs;
};

// Float64, exactly the contract above, reading the inputs through problem's sizes and strides, the
// mask kind problem.mask_kind names and the cache problem.kv_dtype names, in problem.fp8_numerics.
RefOutput Reference(const MlaCase& c);

// Whether c computes with fp8 numerics (an fp8 cache with Fp8Numerics::kFp8).
bool UsesFp8Numerics(const kernels::MlaVerifyProblem& p);

// Per-element bound: |got - want| <= atol + rtol_out * |want| + rtol_p * o_abs.
//   bf16 keeps 8 significant bits: round to nearest moves a value by at most 2^-8 of itself. So the
//   bf16 rounding of o costs at most 2^-8 |want|, and rounding P to bf16 before P·V (each weight off
//   by at most 2^-8 relative) moves o by at most 2^-8 * o_abs. Both terms carry a 2x margin for fp32
//   accumulation, exp2 and split merges. Global: rel Frobenius over real rows <= max_rel_frob.
// fp8 numerics add rtol_p_fp8 * o_abs_fp8 to the bound: the reference rounds each prefix weight to
// e4m3 relative to the row max m, a kernel relative to a running max m' <= m of its own choosing
// (scaled back by exp(m' - m) <= 1, that rounding is no coarser), so both rounded weights lie within
// E4m3RoundingErrorBound(p_j) of p_j and differ by at most twice it.
// Their global check: rel Frobenius against the emulation <= 2 * (what rounding P moved it by) +
// max_rel_frob: the kernel's rounded weights move o about as far as the reference's, in directions of
// their own (at most the sum of both), plus what bf16 allows. The error against the exact math is
// reported beside it (by the triangle inequality it is then within the emulation's own error plus
// that limit).
// lse: |got - want| <= lse_atol + lse_rtol * |want|; an empty row must give -inf exactly.
struct Tolerance {
  double atol = 1e-6;
  double rtol_out = 1.0 / 128;  // 2^-7
  double rtol_p = 1.0 / 128;    // 2^-7
  double rtol_p_fp8 = 2.0;      // two roundings of each prefix weight, each within its bound
  double max_rel_frob = 4e-3;
  double lse_atol = 1e-3;
  double lse_rtol = 1e-5;
  // fp8 numerics computed on e4m3 MMAs (sm_90a's prefix kernel, MlaVerifyPlan::e4m3_mma):
  // their products are exact but their sums are not fp32's (Hopper's e4m3 MMAs keep only part of
  // each k-step's sum; DeepSeek-V3's report measured about 14 bits). A score then errs relative to
  // the sum of its products' magnitudes (RefOutput::score_abs, scaled): delta =
  // e4m3_mma_accumulation * score_abs. Measured on an H100 over the GPU suite's fp8 cases, the
  // worst lse error was 2^-11.4 of score_abs (with each k-step summed in fp32 instead, 2^-15.5);
  // E4m3MmaTolerance allows 2^-11. delta moves lse by at most delta and each weight by a factor
  // within e^(+-2 delta), so o by at most (e^(2 delta) - 1) * o_abs: both bounds grow by that. The
  // global limit does not: over the same cases the kernel's rel Frobenius error stayed within the
  // emulation's limit, whose sum of the weights' roundings dominates (scores in the hundreds, as
  // in EveryE4m3CodeDecodesExactly's second case, are the exception). 0: fp32 sums (every other
  // kernel, and the emulation itself).
  double e4m3_mma_accumulation = 0;
};
// The tolerance of a kernel whose fp8 numerics run on e4m3 MMAs.
inline Tolerance E4m3MmaTolerance() {
  Tolerance t;
  t.e4m3_mma_accumulation = 1.0 / 2048;
  return t;
}

struct Comparison {
  double rel_frobenius = 0;  // ||got - want||_F / ||want||_F over real rows (0 when want is all 0)
  // Against the exact math: ||got - o_exact||_F / ||o_exact||_F (= rel_frobenius without fp8 numerics),
  // and what the fp8 numerics' emulation itself measures there (0 without them).
  double rel_frobenius_exact = 0;
  double numerics_rel_frobenius = 0;
  // ||want.o - want.o_unrounded_p||_F / ||want.o||_F: what rounding P to e4m3 does (0 without fp8 numerics).
  double p_rounding_rel_frobenius = 0;
  double max_abs_err = 0;
  int64_t worst_index = -1;  // flat index into o of the element with the largest err / bound
  double worst_got = 0, worst_want = 0, worst_bound = 0;
  int64_t nan_count = 0;     // non-finite values in real rows of o (and of lse, except wanted -inf)
  int64_t bad_elements = 0;  // elements of o over their bound
  int64_t compared = 0;      // elements of o compared (padding rows excluded)
  double lse_max_abs_err = 0;
  int64_t lse_worst_index = -1;
  int64_t lse_bad = 0;       // lse entries over their bound (or finite where -inf is wanted)
  double max_rel_frob = 4e-3;  // the limit of rel_frobenius

  bool ok() const {
    return nan_count == 0 && bad_elements == 0 && lse_bad == 0 && rel_frobenius <= max_rel_frob;
  }
  // One line per fact: sizes, rel Frobenius, worst element as (row, head, dim) with got/want/bound.
  std::string Describe() const;
  int num_heads = 0;  // for Describe's (row, head, dim) decoding
};

// o_bf16: [N, H, 512] bf16 bits with problem's o strides. lse: [N, H] fp32, or empty to skip.
Comparison Compare(const MlaCase& c, const RefOutput& want, const std::vector<uint16_t>& o_bf16,
                   const std::vector<float>& lse = {}, const Tolerance& tol = {});

float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);  // round to nearest even; NaN stays NaN

// OCP e4m3 ("float8_e4m3fn"): 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; exponent 0 holds
// the subnormals m/8 * 2^-6; 0x7f and 0xff are NaN; no infinities; largest finite 448 (0x7e).
double E4m3ToDouble(uint8_t byte);  // exact; NaN for 0x7f and 0xff
// Round to nearest, ties to even, saturating to +-448 (infinities too: "satfinite"); below 2^-6 the
// quantum is 2^-9, so magnitudes up to 2^-10 give a zero of x's sign. NaN gives 0x7f (0xff if negative).
uint8_t DoubleToE4m3(double x);
// How far DoubleToE4m3 moves a value a in [0, 448]: |E4m3ToDouble(DoubleToE4m3(a)) - a| <=
// min(a, max(2^-4 a, 2^-10)): 3 mantissa bits above 2^-6, half the 2^-9 quantum below, and all of a
// up to 2^-10 (which rounds to zero).
double E4m3RoundingErrorBound(double a);
// The finite codes in order 0x00..0x7e, 0x80..0xfe; i in [0, 254).
uint8_t FiniteE4m3Code(int i);

}  // namespace kjit::reference
