// The combine kernel (traits.h says how CTAs, slices and threads map onto rows and columns): each
// slice merges every that-many-th state of its row with a running max of its own, issuing the LSE
// and O loads of up to kCombineBatch states before using any, so one memory round trip covers the
// slices x kCombineBatch states, with no pass over the LSEs first. A row's slices are then merged in
// slice order through shared memory: bitwise deterministic, no atomics.
#pragma once

#include "common/bf16.cuh"
#include "common/softmax.cuh"
#include "common/sync.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"
#include "mla_verify/timeline.cuh"
#include "mla_verify/traits.h"

namespace kjit {
namespace mla {

// The error word: the OR of the split kernel's CTA slots (after its grid has completed), by one CTA;
// nonzero bits also go into the accumulated word when there is one.
__device__ __forceinline__ void PublishErrors(const MlaVerifyParams& p) {
  __shared__ unsigned any;
  if (threadIdx.x == 0) any = 0;
  __syncthreads();
  unsigned bits = 0;
  for (int i = threadIdx.x; i < p.error_slot_count; i += blockDim.x) bits |= p.error_slots[i];
  if (bits != 0) atomicOr(&any, bits);
  __syncthreads();
  if (threadIdx.x == 0) {
    *p.error_word = any;
    if (any != 0 && p.accumulated_error_word != nullptr) atomicOr(p.accumulated_error_word, any);
  }
}

// Shared memory of the combine: each slice's running max and sum, and the accumulators of every
// slice but the first, for the merge (slice k, half h, thread c8 at ((k - 1) * 2 + h) * threads + c8,
// threads = 64 / parts).
struct CombineSmem {
  float slice_m[kCombineMaxSlices], slice_l[kCombineMaxSlices];
  float4 slice_acc[(kCombineMaxSlices - 1) * 2 * (kCombineThreads / kCombineMaxSlices)];
};
static_assert((kCombineMaxSlices - 1) * 2 * (kCombineThreads / kCombineMaxSlices) >=
                  (kCombineRowsPerCta - 1) * 2 * (kCombineThreads / kCombineRowsPerCta),
              "the accumulators of the one-part wide layout fit");

// The rows of this CTA: kCombineRowsPerCta rows of one slice each (kParts == 0), or one of the
// kParts parts of one row (a wide combine). Everything below is a compile-time constant but the
// indices: a runtime part count made ptxas emit 60% more code (35 KB against 21 KB), and every SM
// fetches the combine's instructions cold on every launch.
template <int kHeads, int kParts>
__device__ __forceinline__ void CombineRows(const MlaVerifyParams& p, CombineSmem& sm) {
  constexpr bool kWide = kParts > 0;
  constexpr int kCols = 8;  // one 16-byte load of 8 bf16 per thread and state
  constexpr int parts = kWide ? kParts : 1;
  constexpr int threads = kCombineThreads / kCombineRowsPerCta / parts;  // per slice: 64 or 32
  constexpr int spr = kWide ? kCombineRowsPerCta * parts : 1;            // slices per row (part)
  const int b = blockIdx.y, tid = threadIdx.x;
  const int slice = tid / threads, c8 = tid % threads;
  const int part = kWide ? slice : 0;  // this slice's place in its row: states part, part + spr, ...
  const int row = kWide ? static_cast<int>(blockIdx.x) / parts : static_cast<int>(blockIdx.x) * kCombineRowsPerCta + slice;
  const int col16 = (kWide ? static_cast<int>(blockIdx.x) % parts * threads : 0) + c8;  // 16-byte column
  // The indptrs are inputs, not the split kernel's results: read before waiting for that grid, so
  // their latency overlaps its tail. Every CTA waits before it may exit, so this grid never
  // completes before the split kernel's.
  const Request rq = LoadRequest(p, b);  // a bad request was reported by the split kernel
  WaitForPrimaryGrid();
  KJIT_STAMP_COMBINE(kTlcWaited);
  if (blockIdx.x == 0 && b == 0) PublishErrors(p);
  // Each thread read the request itself, and a client may rewrite it during the launch: a wide CTA
  // (one row, barriers below) merges only if every thread's own read lets it, so that no thread
  // skips a barrier and none merges with a request it did not check. Without a rewrite this is
  // uniform over each slice anyway.
  const bool mine = rq.ok && row < rq.draft * kHeads;
  const bool active = kWide ? __syncthreads_and(mine) != 0 : mine;
  if (kWide && !active) return;

  const int states = p.num_splits + 1;
  const StateRows first = StateOf(p, b, 0);
  const float* lse_col = first.lse + row;  // state s at s * rows_cap
  const uint4* src = reinterpret_cast<const uint4*>(first.o + static_cast<long long>(row) * kVDim) + col16;
  const long long state_stride = static_cast<long long>(p.rows_cap) * (kVDim / kCols);  // in uint4

  // Running (max, sum, weighted O) of this slice's states, in log2 units. The LSEs are the same for
  // every thread of a slice, so the branches below are uniform over it.
  float m = NegInf(), l = 0.f, acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
  for (int s0 = active ? part : states; s0 < states; s0 += kCombineBatch * spr) {
    uint4 v[kCombineBatch];
    float lse[kCombineBatch];
    // States past the end are skipped with branches that are uniform over the slice (with few
    // splits most of a batch is past the end, and a full batch of clamped loads and weight updates
    // made many-request launches instruction-bound).
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      const int s = s0 + i * spr;
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
      if (s0 + i * spr >= states) break;
      // An empty state (LSE -inf, weight 0) is skipped, not multiplied: its O rows may be an earlier
      // launch's (BeginSplitCta), and 0 times their NaN would still be NaN.
      if (lse[i] == NegInf()) continue;
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

  float mx = m, sum = l;
  bool empty = m == NegInf();  // every state empty: zeros, LSE -inf
  if (kWide) {
    if (c8 == 0) {
      sm.slice_m[slice] = m;
      sm.slice_l[slice] = l;
    }
    if (part > 0) {
      sm.slice_acc[((part - 1) * 2) * threads + c8] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      sm.slice_acc[((part - 1) * 2 + 1) * threads + c8] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
    __syncthreads();
    if (part > 0) return;
#pragma unroll
    for (int k = 1; k < spr; ++k) mx = fmaxf(mx, sm.slice_m[k]);
    empty = mx == NegInf();
    const float f0 = empty ? 0.f : FastExp2(m - mx);
    sum = l * f0;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] *= f0;
#pragma unroll
    for (int k = 1; k < spr; ++k) {  // fixed order: bitwise deterministic
      const float f = empty ? 0.f : FastExp2(sm.slice_m[k] - mx);
      sum += sm.slice_l[k] * f;
      const float4 a = sm.slice_acc[((k - 1) * 2) * threads + c8], bq = sm.slice_acc[((k - 1) * 2 + 1) * threads + c8];
      acc[0] += f * a.x, acc[1] += f * a.y, acc[2] += f * a.z, acc[3] += f * a.w;
      acc[4] += f * bq.x, acc[5] += f * bq.y, acc[6] += f * bq.z, acc[7] += f * bq.w;
    }
  } else if (!active) {
    return;  // nothing to merge: no barrier
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const long long n = rq.q0 + row / kHeads;
  const int h = row % kHeads;
  // Two 8-byte stores: o rows are only 8-byte aligned (o_stride_h % 4 == 0).
  uint2* dst = reinterpret_cast<uint2*>(p.o + n * p.o_stride_n + h * p.o_stride_h + col16 * kCols);
  dst[0] = make_uint2(PackBf16x2(acc[0] * inv, acc[1] * inv), PackBf16x2(acc[2] * inv, acc[3] * inv));
  dst[1] = make_uint2(PackBf16x2(acc[4] * inv, acc[5] * inv), PackBf16x2(acc[6] * inv, acc[7] * inv));
  if (p.lse != nullptr && col16 == 0)
    p.lse[n * kHeads + h] = empty ? NegInf() : (mx + __log2f(sum)) * 0.69314718055994531f;
}

template <int kHeads>
__device__ __forceinline__ void CombineBody(const MlaVerifyParams& p) {
  __shared__ CombineSmem sm;
  if (!CombineIsWide(p.combine_row_parts, p.num_splits + 1)) {  // uniform over the grid
    CombineRows<kHeads, 0>(p, sm);
  } else if (CombinePartsOf(p.combine_row_parts) == 1) {
    CombineRows<kHeads, 1>(p, sm);
  } else {
    CombineRows<kHeads, kCombineMaxRowParts>(p, sm);
  }
}

}  // namespace mla
}  // namespace kjit
