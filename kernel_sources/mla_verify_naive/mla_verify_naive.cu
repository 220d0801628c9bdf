// The oracle: the MLA verify contract (KERNEL.md) written the slow, obvious way. One block per
// (q row, head); fp32 everywhere; P rounded to bf16 before P·V like the fast kernel and SGLang's
// Triton kernel. Two passes over the keys: the row maximum, then softmax weights and P·V in chunks
// of kThreads keys (scores recomputed, bit-identical). Fixed reduction orders, no atomics except the
// OR of error bits: bitwise deterministic.
#include "mla_verify_naive/naive_params.h"

namespace kjit {
namespace naive {

__device__ __forceinline__ float LoadBf16(const unsigned short* p) {
  return __uint_as_float(static_cast<unsigned>(*p) << 16);
}

// 2^e as a float, for -126 <= e <= 127.
__device__ __forceinline__ float Pow2(int e) { return __uint_as_float(static_cast<unsigned>(e + 127) << 23); }

// e4m3 byte -> float, from the format's definition (bias 7, subnormals m/8 * 2^-6, S.1111.111 NaN).
__device__ __forceinline__ float DecodeE4m3(unsigned char b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float mag = e == 15 && m == 7 ? __int_as_float(0x7fc00000)
                    : e == 0          ? static_cast<float>(m) * Pow2(-9)
                                      : static_cast<float>(8 + m) * Pow2(e - 10);
  return (b & 0x80) ? -mag : mag;
}

// float -> the nearest e4m3 value, ties to even, saturating at +-448.
__device__ __forceinline__ float RoundToE4m3(float x) {
  if (x != x) return x;
  const float a = fminf(fabsf(x), 480.f);  // past 464 everything rounds to 448 once saturated
  // The spacing of e4m3 values around a: 2^-9 below 2^-6 (subnormals), else 2^(exponent - 3).
  const int e = static_cast<int>((__float_as_uint(a) >> 23) & 0xff) - 127;
  const float quantum = e < -6 ? Pow2(-9) : Pow2(e - 3);
  const float r = rintf(a / quantum) * quantum;
  return copysignf(fminf(r, 448.f), x);
}

__device__ __forceinline__ float RoundToBf16(float x) {  // round to nearest even, as cvt.rn.bf16
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return __uint_as_float(static_cast<unsigned>(h) << 16);
}

__device__ __forceinline__ long long IndptrAt(const void* indptr, int is_64, long long i) {
  return is_64 ? static_cast<const long long*>(indptr)[i] : static_cast<const int*>(indptr)[i];
}

__device__ __forceinline__ void RaiseError(const NaiveParams& p, unsigned bits) {
  atomicOr(p.error_word, bits);
  if (p.accumulated_error_word != nullptr) atomicOr(p.accumulated_error_word, bits);
}

struct Row {
  int b;          // request
  int r;          // draft row within the request
  int draft;      // D_b
  long long q0;   // first q row of the request
  long long kv0;  // first kv_indices entry of the request
  long long prefix;
  long long mask_base;   // bool: mask_indptr[b] + P_b; packed: first word of row r
  long long mask_pitch;  // bool: P_b + D_b bytes per row
  bool mask_ok;
};

// Finds the request of q row n and checks its bounds; false (and kErrBadIndptr) when inconsistent.
template <bool kPacked>
__device__ bool FindRow(const NaiveParams& p, long long n, Row* row) {
  long long words_before = 0;
  for (int b = 0; b < p.batch; ++b) {
    const long long q0 = IndptrAt(p.qo_indptr, p.qo_indptr_64, b), q1 = IndptrAt(p.qo_indptr, p.qo_indptr_64, b + 1);
    const long long k0 = IndptrAt(p.kv_indptr, p.kv_indptr_64, b), k1 = IndptrAt(p.kv_indptr, p.kv_indptr_64, b + 1);
    if (q0 < 0 || q1 < q0 || q1 > p.num_q || k0 < 0 || k1 < k0 || k1 > p.num_kv_indices) return false;
    const long long d = q1 - q0;
    if (n >= q0 && n < q1) {
      row->b = b;
      row->r = static_cast<int>(n - q0);
      row->draft = static_cast<int>(d);
      row->q0 = q0;
      row->kv0 = k0;
      row->prefix = k1 - k0;
      if (kPacked) {
        const long long words = (d + 31) / 32;
        row->mask_base = words_before + row->r * words;
        row->mask_pitch = words;
        row->mask_ok = row->mask_base + words <= p.mask_len;
      } else {
        // mask_indptr is client data: bound it before any sum with it can overflow. The offset
        // within the request is a product of real buffer sizes (rows of q, kv_indices).
        const long long start = p.mask_indptr[b];
        row->mask_pitch = row->prefix + d;
        const long long offset = row->r * row->mask_pitch + row->prefix;
        row->mask_ok = start >= 0 && start <= p.mask_len && offset + d <= p.mask_len - start;
        row->mask_base = row->mask_ok ? start + offset : 0;
      }
      return true;
    }
    words_before += d * ((d + 31) / 32);
  }
  return false;
}

template <bool kPacked>
__device__ bool TreeAllowed(const NaiveParams& p, const Row& row, int c) {
  if (p.is_causal && c > row.r) return false;
  if (kPacked) {
    const unsigned word = static_cast<const unsigned*>(p.mask)[row.mask_base + c / 32];
    return ((word >> (c % 32)) & 1u) != 0;
  }
  return static_cast<const unsigned char*>(p.mask)[row.mask_base + c] != 0;
}

// Key j of the row: prefix keys 0..P-1, then tree keys P..P+D-1. Returns null when not attended;
// *fp8 says whether the row is e4m3 bytes (a prefix key of an fp8 cache) or bf16.
template <bool kPacked>
__device__ __forceinline__ const void* KeyRow(const NaiveParams& p, const Row& row, long long j, float* scale_log2,
                              float* v_scale, bool* fp8) {
  *fp8 = false;
  if (j < row.prefix) {
    const long long slot = p.kv_indices[row.kv0 + j];
    if (slot < 0 || slot >= p.num_slots) {
      RaiseError(p, kErrKvIndexOutOfRange);
      return nullptr;
    }
    *scale_log2 = p.prefix_scale_log2;
    *v_scale = p.v_scale;
    *fp8 = p.kv_fp8 != 0;
    if (p.kv_fp8) return reinterpret_cast<const unsigned char*>(p.kv_cache) + slot * kKDim;
    return p.kv_cache + slot * kKDim;
  }
  const int c = static_cast<int>(j - row.prefix);
  if (!TreeAllowed<kPacked>(p, row, c)) return nullptr;
  *scale_log2 = p.tree_scale_log2;
  *v_scale = 1.f;
  return p.k_extend + (row.q0 + c) * p.k_extend_stride_n;
}

// Element i of a key row.
__device__ __forceinline__ float KeyAt(const void* k, bool fp8, int i) {
  return fp8 ? DecodeE4m3(static_cast<const unsigned char*>(k)[i]) : LoadBf16(static_cast<const unsigned short*>(k) + i);
}

__device__ __forceinline__ float Dot(const float* q, const void* k, bool fp8) {
  float acc = 0.f;
  for (int i = 0; i < kKDim; ++i) acc = fmaf(q[i], KeyAt(k, fp8, i), acc);
  return acc;
}

// Fixed-shape tree reduction over the block (every thread gets the result).
template <bool kMax>
__device__ float BlockReduce(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float other = scratch[threadIdx.x + stride];
      scratch[threadIdx.x] = kMax ? fmaxf(scratch[threadIdx.x], other) : scratch[threadIdx.x] + other;
    }
    __syncthreads();
  }
  const float result = scratch[0];
  __syncthreads();
  return result;
}

template <bool kPacked>
__global__ void __launch_bounds__(kThreads) mla_verify_naive(const NaiveParams p) {
  __shared__ float q_s[kKDim];
  __shared__ float q8_s[kKDim];                    // q rounded to e4m3 (fp8 numerics' prefix keys)
  __shared__ float p_s[kThreads];                  // this chunk's weights, rounded to bf16 (or e4m3)
  __shared__ const void* v_s[kThreads];            // this chunk's V rows (null: not attended)
  __shared__ bool v8_s[kThreads];                  // whether they are e4m3 bytes
  __shared__ float vscale_s[kThreads];
  __shared__ float scratch[kThreads];

  const long long n = blockIdx.x;
  const int h = blockIdx.y;
  Row row;
  if (!FindRow<kPacked>(p, n, &row)) {
    if (threadIdx.x == 0) RaiseError(p, kErrBadIndptr);
    return;
  }
  if (!row.mask_ok && threadIdx.x == 0) RaiseError(p, kErrBadIndptr);
  if (p.v_extend != nullptr && h == 0) {  // V is k_extend[..., :512]; a given v_extend must agree
    for (int i = threadIdx.x; i < kVDim; i += kThreads) {
      if (p.v_extend[n * p.v_extend_stride_n + i] != p.k_extend[n * p.k_extend_stride_n + i]) {
        RaiseError(p, kErrVExtendDiffers);
      }
    }
  }
  const long long keys = row.prefix + (row.mask_ok ? row.draft : 0);

  const unsigned short* q = p.q + n * p.q_stride_n + h * p.q_stride_h;
  for (int i = threadIdx.x; i < kKDim; i += kThreads) {
    q_s[i] = LoadBf16(q + i);
    q8_s[i] = RoundToE4m3(q_s[i]);
  }
  __syncthreads();
  const bool round = p.kv_fp8 != 0 && p.fp8_round != 0;

  // Pass 1: the row maximum of the log2-scaled scores.
  float m = -__int_as_float(0x7f800000);
  for (long long j = threadIdx.x; j < keys; j += kThreads) {
    float scale, vs;
    bool fp8;
    const void* k = KeyRow<kPacked>(p, row, j, &scale, &vs, &fp8);
    if (k != nullptr) m = fmaxf(m, Dot(fp8 && round ? q8_s : q_s, k, fp8) * scale);
  }
  m = BlockReduce<true>(m, scratch);

  // Pass 2: weights (fp32 for the sum, bf16 for P·V) and the weighted V rows, chunk by chunk.
  float l_part = 0.f;
  float acc[kDimsPerThread] = {};
  for (long long base = 0; base < keys; base += kThreads) {
    const long long j = base + threadIdx.x;
    float w = 0.f, scale = 0.f, vs = 0.f;
    bool fp8 = false;
    const void* k = j < keys ? KeyRow<kPacked>(p, row, j, &scale, &vs, &fp8) : nullptr;
    if (k != nullptr) w = exp2f(Dot(fp8 && round ? q8_s : q_s, k, fp8) * scale - m);
    l_part += w;
    p_s[threadIdx.x] = fp8 && round ? RoundToE4m3(w) : RoundToBf16(w);
    v_s[threadIdx.x] = k;
    v8_s[threadIdx.x] = fp8;
    vscale_s[threadIdx.x] = vs;
    __syncthreads();
    for (int t = 0; t < kThreads; ++t) {
      if (v_s[t] == nullptr) continue;
      for (int e = 0; e < kDimsPerThread; ++e) {
        const int d = threadIdx.x + e * kThreads;
        acc[e] = fmaf(p_s[t], KeyAt(v_s[t], v8_s[t], d) * vscale_s[t], acc[e]);
      }
    }
    __syncthreads();
  }
  const float l = BlockReduce<false>(l_part, scratch);

  const bool empty = !(l > 0.f);
  unsigned short* o = p.o + n * p.o_stride_n + h * p.o_stride_h;
  for (int e = 0; e < kDimsPerThread; ++e) {
    const float value = empty ? 0.f : acc[e] / l;
    unsigned short bits;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));
    o[threadIdx.x + e * kThreads] = bits;
  }
  if (p.lse != nullptr && threadIdx.x == 0) {
    p.lse[n * p.num_heads + h] = empty ? -__int_as_float(0x7f800000) : (m + log2f(l)) * 0.6931471805599453f;
  }
}

}  // namespace naive
}  // namespace kjit
