// The combine kernel: one CTA per query row. The row's state weights go to shared memory; then
// kCombineSlices slices of 128 threads (4 of the 512 output columns per thread) each accumulate
// every kCombineSlices-th state, and the slices are added in a fixed order: bitwise deterministic,
// with many independent loads in flight so the merge streams the workspace even for one request.
#pragma once

#include "common/bf16.cuh"
#include "common/lse_merge.cuh"
#include "common/softmax.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"
#include "mla_verify/traits.h"

namespace kjit {
namespace mla {

template <int kHeads>
__device__ __forceinline__ void CombineBody(const MlaVerifyParams& p) {
  __shared__ float weights[kCombineMaxStates];
  __shared__ float warp_max[kCombineThreads / 32];
  __shared__ float4 slice_acc[kCombineSlices - 1][128];
  const int row = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const Request rq = LoadRequest(p, b);  // a bad request was reported by the split kernel
  if (!rq.ok || row >= rq.draft * kHeads) return;  // uniform over the CTA

  const int states = p.num_splits + 1;
  const long long first = static_cast<long long>(b) * states;
  const float* lse_col = p.part_lse + first * p.rows_cap + row;  // state s at s * rows_cap
  float m = NegInf();
  for (int s = tid; s < states; s += kCombineThreads) m = fmaxf(m, lse_col[static_cast<long long>(s) * p.rows_cap]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if ((tid & 31) == 0) warp_max[tid >> 5] = m;
  __syncthreads();
  m = warp_max[0];
#pragma unroll
  for (int w = 1; w < kCombineThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
  LseMerge merge(m);
  for (int s = tid; s < states; s += kCombineThreads) {
    const float lse = lse_col[static_cast<long long>(s) * p.rows_cap];
    weights[s] = lse == NegInf() || merge.Empty() ? 0.f : FastExp2(lse - m);
  }
  __syncthreads();

  const int slice = tid / 128, c4 = tid % 128;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  // Four bf16 partial outputs per thread and state: one 8-byte load.
  const uint2* src = reinterpret_cast<const uint2*>(p.part_o + (first * p.rows_cap + row) * kVDim) + c4;
  const long long state_stride = static_cast<long long>(p.rows_cap) * (kVDim / 4);  // in uint2
  // Batches of kBatch states: all loads of a batch are issued before any is used.
  constexpr int kBatch = 8;
  for (int s0 = slice; s0 < states; s0 += kBatch * kCombineSlices) {
    uint2 v[kBatch];
    float w[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int s = s0 + i * kCombineSlices;
      const int sc = s < states ? s : states - 1;  // in range, so the loads need no branches
      w[i] = s < states ? weights[sc] : 0.f;  // 0 for an empty state, whose O the split kernel zeroed
      v[i] = src[sc * state_stride];
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      acc.x += w[i] * __uint_as_float(v[i].x << 16);
      acc.y += w[i] * __uint_as_float(v[i].x & 0xffff0000u);
      acc.z += w[i] * __uint_as_float(v[i].y << 16);
      acc.w += w[i] * __uint_as_float(v[i].y & 0xffff0000u);
    }
  }
  if (slice > 0) slice_acc[slice - 1][c4] = acc;
  __syncthreads();
  if (slice > 0) return;
#pragma unroll
  for (int i = 0; i < kCombineSlices - 1; ++i) {  // fixed order: bitwise deterministic
    const float4 v = slice_acc[i][c4];
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  for (int s = 0; s < states; ++s) merge.weight_sum += weights[s];
  const float inv = merge.Empty() ? 0.f : 1.f / merge.weight_sum;
  const long long n = rq.q0 + row / kHeads;
  const int h = row % kHeads;
  unsigned short* dst = p.o + n * p.o_stride_n + h * p.o_stride_h + c4 * 4;
  *reinterpret_cast<uint2*>(dst) =
      make_uint2(PackBf16x2(acc.x * inv, acc.y * inv), PackBf16x2(acc.z * inv, acc.w * inv));
  if (p.lse != nullptr && c4 == 0) p.lse[n * kHeads + h] = merge.LseNatural();
}

}  // namespace mla
}  // namespace kjit
