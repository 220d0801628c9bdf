// The combine kernel: one CTA of 128 threads per query row (each thread owns 4 of the 512 output
// columns) merges the row's states in a fixed order (tree part first, then the prefix chunks) and
// writes bf16 o and, when asked, the natural-log lse. Fixed order, plain loads: bitwise
// deterministic. Many CTAs with independent loads in flight: the merge streams the workspace at
// memory speed even for a single request.
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
  static_assert(kCombineThreads * 4 == kVDim, "one float4 of columns per thread");
  const int row = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const Request rq = LoadRequest(p, b);  // a bad request was reported by the split kernel
  if (!rq.ok || row >= rq.draft * kHeads) return;

  const int states = p.num_splits + 1;
  const long long first = static_cast<long long>(b) * states;
  const float* lse_col = p.part_lse + first * p.rows_cap + row;  // state s at s * rows_cap
  float m = NegInf();
  for (int s = 0; s < states; ++s) m = fmaxf(m, lse_col[static_cast<long long>(s) * p.rows_cap]);

  LseMerge merge(m);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (!merge.Empty()) {
    const float4* src = reinterpret_cast<const float4*>(p.part_o + (first * p.rows_cap + row) * kVDim) + tid;
    const long long state_stride = static_cast<long long>(p.rows_cap) * (kVDim / 4);  // in float4
#pragma unroll 4
    for (int s = 0; s < states; ++s) {
      const float w = merge.Add(lse_col[static_cast<long long>(s) * p.rows_cap]);
      if (w == 0.f) continue;  // empty (its O is never written) or negligible
      const float4 v = src[s * state_stride];
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
  }
  const float inv = merge.Empty() ? 0.f : 1.f / merge.weight_sum;
  const long long n = rq.q0 + row / kHeads;
  const int h = row % kHeads;
  unsigned short* dst = p.o + n * p.o_stride_n + h * p.o_stride_h + tid * 4;
  *reinterpret_cast<uint2*>(dst) =
      make_uint2(PackBf16x2(acc.x * inv, acc.y * inv), PackBf16x2(acc.z * inv, acc.w * inv));
  if (p.lse != nullptr && tid == 0) p.lse[n * kHeads + h] = merge.LseNatural();
}

}  // namespace mla
}  // namespace kjit
