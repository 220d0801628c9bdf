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
};

// Host copies of every input exactly as laid out in device memory (KERNEL.md's interface table).
struct MlaCase {
  CaseSpec spec;
  kernels::MlaVerifyProblem problem;
  std::vector<uint16_t> q;         // [N, H, 576] bf16 bits, N(0,1) rounded to bf16
  std::vector<uint16_t> k_extend;  // [N, 1, 576]
  std::vector<uint16_t> kv_cache;  // [S, 1, 576]; slot 0 is the dummy slot
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

struct RefOutput {
  std::vector<double> o;    // [N, H, 512]
  std::vector<double> lse;  // [N, H]; -inf for an empty row
  // [N, H, 512]: sum_j p_j |V_j[d]| / l (v_scale included): the scale of the error that rounding P to
  // bf16 can cause in o[d]; Compare's per-element bound uses it.
  std::vector<double> o_abs;
};

// Float64, exactly the contract above, reading the inputs through problem's sizes and strides and
// the mask kind problem.mask_kind names.
RefOutput Reference(const MlaCase& c);

// Per-element bound: |got - want| <= atol + rtol_out * |want| + rtol_p * o_abs.
//   bf16 keeps 8 significant bits: round to nearest moves a value by at most 2^-8 of itself. So the
//   bf16 rounding of o costs at most 2^-8 |want|, and rounding P to bf16 before P·V (each weight off
//   by at most 2^-8 relative) moves o by at most 2^-8 * o_abs. Both terms carry a 2x margin for fp32
//   accumulation, exp2 and split merges. Global: rel Frobenius over real rows <= max_rel_frob.
// lse: |got - want| <= lse_atol + lse_rtol * |want|; an empty row must give -inf exactly.
struct Tolerance {
  double atol = 1e-6;
  double rtol_out = 1.0 / 128;  // 2^-7
  double rtol_p = 1.0 / 128;    // 2^-7
  double max_rel_frob = 4e-3;
  double lse_atol = 1e-3;
  double lse_rtol = 1e-5;
};

struct Comparison {
  double rel_frobenius = 0;  // ||got - want||_F / ||want||_F over real rows (0 when want is all 0)
  double max_abs_err = 0;
  int64_t worst_index = -1;  // flat index into o of the element with the largest err / bound
  double worst_got = 0, worst_want = 0, worst_bound = 0;
  int64_t nan_count = 0;     // non-finite values in real rows of o (and of lse, except wanted -inf)
  int64_t bad_elements = 0;  // elements of o over their bound
  int64_t compared = 0;      // elements of o compared (padding rows excluded)
  double lse_max_abs_err = 0;
  int64_t lse_worst_index = -1;
  int64_t lse_bad = 0;       // lse entries over their bound (or finite where -inf is wanted)
  double max_rel_frob = 4e-3;

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

}  // namespace kjit::reference
