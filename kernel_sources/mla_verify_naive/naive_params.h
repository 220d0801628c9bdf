// Parameters of the oracle kernel, shared verbatim by the host launcher and the device code (plain
// C++: no CUDA or standard headers). Independent of the fast family's headers on purpose: the oracle
// must not share the code it is used to check.
#pragma once

namespace kjit {
namespace naive {

struct NaiveParams {
  const unsigned short* q;         // [N, H, 576] bf16, strides below
  const unsigned short* k_extend;  // [N, 1, 576] bf16
  const unsigned short* v_extend;  // null, or [N, 1, 512] bf16 that must equal k_extend[..., :512]
  const unsigned short* kv_cache;  // [S, 1, 576] bf16, or e4m3 bytes when kv_fp8; row stride 576
  const void* qo_indptr;           // [B + 1] int32, or int64 when qo_indptr_64
  const void* kv_indptr;           // [B + 1], prefix only; int32, or int64 when kv_indptr_64
  const long long* kv_indices;     // [num_kv_indices]
  const void* mask;                // bool bytes or packed uint32 words
  const long long* mask_indptr;    // [B + 1] (bool masks)
  unsigned short* o;               // [N, H, 512] bf16
  float* lse;                      // [N, H] fp32 natural log, or null
  unsigned* error_word;            // MlaVerifyError bits
  unsigned* accumulated_error_word;  // null, or a word the kernel also ORs its bits into (never cleared)

  long long num_q;
  long long num_slots;
  long long num_kv_indices;
  long long mask_len;
  long long q_stride_n, q_stride_h;
  long long k_extend_stride_n;
  long long v_extend_stride_n;
  long long o_stride_n, o_stride_h;

  int batch;
  int num_heads;
  int is_causal;
  int qo_indptr_64, kv_indptr_64;
  float prefix_scale_log2;  // sm_scale * k_scale * log2(e)
  float tree_scale_log2;    // sm_scale * log2(e)
  float v_scale;
  int kv_fp8;     // 1: kv_cache holds fp8 e4m3 bytes
  int fp8_round;  // with kv_fp8: round q and the weights to e4m3 on prefix keys (fp8 numerics)
};

// One block per (q row, head); the block's threads each own kDimsPerThread output dims and, in turn,
// one key of a chunk of kThreads keys.
constexpr int kThreads = 128;
constexpr int kKDim = 576;
constexpr int kVDim = 512;
constexpr int kDimsPerThread = kVDim / kThreads;

// Same values as runtime/kernels/mla_verify/args.h's MlaVerifyError.
constexpr unsigned kErrKvIndexOutOfRange = 1u << 0;
constexpr unsigned kErrBadIndptr = 1u << 1;
constexpr unsigned kErrVExtendDiffers = 1u << 2;

}  // namespace naive
}  // namespace kjit
