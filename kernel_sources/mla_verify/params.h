// Kernel parameters of the MLA verify family, shared verbatim by the host launcher and the device
// code (plain C++: no CUDA or standard headers), so the two cannot disagree on the layout.
#pragma once

namespace kjit {
namespace mla {

// Workspace layout (offsets from MlaVerifyParams' pointers, all set by the host plan):
//   error_word: one uint32 of MlaVerifyError bits: the OR of the error slots, written by the combine
//   accumulated_error_word: null, or a uint32 the combine ORs nonzero bits into and never clears,
//               so a caller can check the launches since its last look at a sync point of its own
//   error_slots: [error_slot_count] uint32, one per split-kernel CTA (linear block index), each
//               written by its CTA on every launch (so nothing needs zeroing in-stream)
//   part_lse:   [batch][num_splits + 1][rows_cap] fp32, log2 units; -inf = empty state
//   part_o:     [batch][num_splits + 1][rows_cap][512] bf16, normalized by the state's sum (half
//               the bytes of fp32; the merge weights and sums stay fp32)
// Split 0 is the draft-tree part; splits 1..num_splits are prefix chunks.
struct MlaVerifyParams {
  const unsigned short* q;         // [N, H, 576] bf16
  const unsigned short* k_extend;  // [N, 1, 576] bf16
  const unsigned short* v_extend;  // null, or [N, 1, 512] bf16 that must equal k_extend[..., :512]
  const unsigned short* kv_cache;  // [S, 1, 576] bf16, or fp8 e4m3 bytes (MlaVerifySplit's kKv = 1)
  const void* qo_indptr;           // [B + 1] int32, or int64 when qo_indptr_64
  const void* kv_indptr;           // [B + 1] int32, or int64 when kv_indptr_64
  const long long* kv_indices;     // [num_kv_indices]
  const void* mask;                // bool bytes or packed uint32 words
  const long long* mask_indptr;    // [B + 1] (bool masks)
  unsigned short* o;               // [N, H, 512] bf16
  float* lse;                      // [N, H] fp32 natural log, or null
  unsigned short* part_o;
  float* part_lse;
  unsigned* error_word;
  unsigned* accumulated_error_word;
  unsigned* error_slots;

  long long num_q;
  long long num_slots;
  long long num_kv_indices;
  long long mask_len;
  long long q_stride_n, q_stride_h;
  long long k_extend_stride_n;
  long long v_extend_stride_n;
  long long o_stride_n, o_stride_h;

  int batch;
  int max_draft;
  int num_splits;  // prefix chunks; the workspace holds num_splits + 1 states per row
  int rows_cap;    // max_draft * H: rows of one request's states
  int error_slot_count;  // the split kernel's CTAs
  int combine_row_parts;  // the combine's layout (traits.h: CombineIsWide, CombinePartsOf)
  int flags;  // bit 0 (kCausalBit): causal; bit 1 (kFp8RoundBit): fp8 numerics' rounding of q and P
              // (read by kKv = 1 kernels); bit 2 (kTreeLaunchBit): the tree launch of the fp8-MMA sequence;
              // bit 3 (kHalfTileBit): each split CTA covers half its tile's rows
  int qo_indptr_64, kv_indptr_64;  // 1: that index pointer holds int64 entries
  float prefix_scale_log2;  // sm_scale * k_scale * log2(e)
  float tree_scale_log2;    // sm_scale * log2(e)
  float v_scale;
};
// The size an older in-process client passes: new flags go into existing fields' spare bits.
static_assert(sizeof(MlaVerifyParams) == 256, "MlaVerifyParams keeps its size across client versions");
constexpr int kCausalBit = 1;    // MlaVerifyParams::flags bits
constexpr int kFp8RoundBit = 2;
constexpr int kTreeLaunchBit = 4;
// sm_90a's 64-row tiles: each split CTA covers 32 rows (m-tile x of the grid: rows 32x..32x+31),
// the rest of its tile empty, so that a short-prefix launch writes half the partial O per CTA
// (the plan sets it where twice the CTAs take at most three quarters of the SMs).
constexpr int kHalfTileBit = 8;

// Error bits (same values as runtime/kernels/mla_verify/args.h's MlaVerifyError).
constexpr unsigned kErrKvIndexOutOfRange = 1u << 0;
constexpr unsigned kErrBadIndptr = 1u << 1;
constexpr unsigned kErrVExtendDiffers = 1u << 2;

}  // namespace mla
}  // namespace kjit
