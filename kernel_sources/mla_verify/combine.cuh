// The combine kernel. kCombineSlices slices of 64 threads per CTA, each thread 8 of the 512 output
// columns (one 16-byte load of bf16 partial O per state). A query row takes
// CombineSlicesPerRow(states) slices (traits.h), which each merge every that-many-th state with a
// running max of their own, issuing the LSE and O loads of up to kCombineBatch states before using
// any: one memory round trip covers the row's slices x kCombineBatch states, with no pass over the
// LSEs first. A row's slices are then merged in slice order through shared memory: bitwise
// deterministic, no atomics. With few states one CTA serves 8 rows, one slice each, so launches with
// many rows (64 heads, batches) are not a string of CTA waves of one row each.
#pragma once

#include "common/bf16.cuh"
#include "common/softmax.cuh"
#include "common/sync.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"
#include "mla_verify/traits.h"

namespace kjit {
namespace mla {

// The error word: the OR of the split kernel's CTA slots (after its grid has completed), by one CTA.
__device__ __forceinline__ void PublishErrors(const MlaVerifyParams& p) {
  __shared__ unsigned any;
  if (threadIdx.x == 0) any = 0;
  __syncthreads();
  unsigned bits = 0;
  for (int i = threadIdx.x; i < p.error_slot_count; i += blockDim.x) bits |= p.error_slots[i];
  if (bits != 0) atomicOr(&any, bits);
  __syncthreads();
  if (threadIdx.x == 0) *p.error_word = any;
}

// Shared memory of the combine: each slice's running max and sum, and the accumulators of every
// slice but the first, for the merge.
struct CombineSmem {
  float slice_m[kCombineSlices], slice_l[kCombineSlices];
  float4 slice_acc[kCombineSlices - 1][2][kCombineThreads / kCombineSlices];
};

// The rows of this CTA, kSpr = CombineSlicesPerRow(states) slices each (a compile-time constant, so
// the load batches and the merge unroll as with one row per CTA).
template <int kHeads, int kSpr>
__device__ __forceinline__ void CombineRows(const MlaVerifyParams& p, CombineSmem& sm) {
  constexpr int kSliceThreads = kCombineThreads / kCombineSlices;
  constexpr int kCols = kVDim / kSliceThreads;
  static_assert(kCols == 8, "one 16-byte load of 8 bf16 per thread and state");
  const int b = blockIdx.y, tid = threadIdx.x;
  const int slice = tid / kSliceThreads, c8 = tid % kSliceThreads;
  const int part = slice % kSpr;  // this slice's place in its row: states part, part + kSpr, ...
  const int row = blockIdx.x * (kCombineSlices / kSpr) + slice / kSpr;
  // The indptrs are inputs, not the split kernel's results: read before waiting for that grid, so
  // their latency overlaps its tail. Every CTA waits before it may exit, so this grid never
  // completes before the split kernel's.
  const Request rq = LoadRequest(p, b);  // a bad request was reported by the split kernel
  WaitForPrimaryGrid();
  if (blockIdx.x == 0 && b == 0) PublishErrors(p);
  const bool active = rq.ok && row < rq.draft * kHeads;  // uniform over each slice
  if (kSpr == kCombineSlices && !active) return;        // one row per CTA: uniform over it

  const int states = p.num_splits + 1;
  const long long first = static_cast<long long>(b) * states;
  const float* lse_col = p.part_lse + first * p.rows_cap + row;  // state s at s * rows_cap
  const uint4* src = reinterpret_cast<const uint4*>(p.part_o + (first * p.rows_cap + row) * kVDim) + c8;
  const long long state_stride = static_cast<long long>(p.rows_cap) * (kVDim / kCols);  // in uint4

  // Running (max, sum, weighted O) of this slice's states, in log2 units. The LSEs are the same for
  // every thread of a slice, so the branches below are uniform over it.
  float m = NegInf(), l = 0.f, acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
  for (int s0 = active ? part : states; s0 < states; s0 += kCombineBatch * kSpr) {
    uint4 v[kCombineBatch];
    float lse[kCombineBatch];
    // States past the end are skipped with branches that are uniform over the slice (with few
    // splits most of a batch is past the end, and a full batch of clamped loads and weight updates
    // made many-request launches instruction-bound).
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      const int s = s0 + i * kSpr;
      lse[i] = NegInf();  // -inf: an empty state (its O is zero), weight 0
      v[i] = make_uint4(0u, 0u, 0u, 0u);
      if (s < states) {
        lse[i] = lse_col[static_cast<long long>(s) * p.rows_cap];
        v[i] = src[s * state_stride];
      }
    }
    float m_new = m;
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) m_new = fmaxf(m_new, lse[i]);
    if (m_new == NegInf()) continue;  // nothing but empty states so far
    const float scale = FastExp2(m - m_new);  // 0 while m is -inf
    l *= scale;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] *= scale;
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      if (s0 + i * kSpr >= states) break;
      const float w = FastExp2(lse[i] - m_new);
      l += w;
      const unsigned words[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        acc[2 * c] += w * __uint_as_float(words[c] << 16);
        acc[2 * c + 1] += w * __uint_as_float(words[c] & 0xffff0000u);
      }
    }
    m = m_new;
  }

  if (c8 == 0) {
    sm.slice_m[slice] = m;
    sm.slice_l[slice] = l;
  }
  if (part > 0) {
    sm.slice_acc[slice - 1][0][c8] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    sm.slice_acc[slice - 1][1][c8] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  }
  if (kSpr == 1) {
    if (!active) return;  // nothing to merge: no barrier
  } else {
    __syncthreads();
    if (part > 0 || !active) return;
  }
  float mx = m;
#pragma unroll
  for (int k = 1; k < kSpr; ++k) mx = fmaxf(mx, sm.slice_m[slice + k]);
  const bool empty = mx == NegInf();  // every state empty: zeros, LSE -inf
  const float f0 = empty ? 0.f : FastExp2(m - mx);
  float sum = l * f0;
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] *= f0;
#pragma unroll
  for (int k = 1; k < kSpr; ++k) {  // fixed order: bitwise deterministic
    const float f = empty ? 0.f : FastExp2(sm.slice_m[slice + k] - mx);
    sum += sm.slice_l[slice + k] * f;
    const float4 a = sm.slice_acc[slice + k - 1][0][c8], bq = sm.slice_acc[slice + k - 1][1][c8];
    acc[0] += f * a.x, acc[1] += f * a.y, acc[2] += f * a.z, acc[3] += f * a.w;
    acc[4] += f * bq.x, acc[5] += f * bq.y, acc[6] += f * bq.z, acc[7] += f * bq.w;
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const long long n = rq.q0 + row / kHeads;
  const int h = row % kHeads;
  // Two 8-byte stores: o rows are only 8-byte aligned (o_stride_h % 4 == 0).
  uint2* dst = reinterpret_cast<uint2*>(p.o + n * p.o_stride_n + h * p.o_stride_h + c8 * kCols);
  dst[0] = make_uint2(PackBf16x2(acc[0] * inv, acc[1] * inv), PackBf16x2(acc[2] * inv, acc[3] * inv));
  dst[1] = make_uint2(PackBf16x2(acc[4] * inv, acc[5] * inv), PackBf16x2(acc[6] * inv, acc[7] * inv));
  if (p.lse != nullptr && c8 == 0)
    p.lse[n * kHeads + h] = empty ? NegInf() : (mx + __log2f(sum)) * 0.69314718055994531f;
}

template <int kHeads>
__device__ __forceinline__ void CombineBody(const MlaVerifyParams& p) {
  __shared__ CombineSmem sm;
  switch (CombineSlicesPerRow(p.num_splits + 1)) {  // uniform over the grid
    case 1: CombineRows<kHeads, 1>(p, sm); break;
    default: CombineRows<kHeads, kCombineSlices>(p, sm); break;
  }
}

}  // namespace mla
}  // namespace kjit
