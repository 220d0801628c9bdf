// The combine kernel: one warp per query row merges the row's states (tree part first, then the
// prefix chunks in order) and writes bf16 o and, when asked, the natural-log lse. Fixed order and
// plain loads: bitwise deterministic.
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
  const int b = blockIdx.y, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kCombineWarps + (threadIdx.x >> 5);
  const Request rq = LoadRequest(p, b);  // a bad request was reported by the split kernel
  if (!rq.ok || row >= rq.draft * kHeads) return;

  const int states = p.num_splits + 1;
  const long long first = static_cast<long long>(b) * states;
  const float* lse_col = p.part_lse + first * p.rows_cap + row;  // state s at s * rows_cap
  float m = NegInf();
  for (int s = lane; s < states; s += 32) m = fmaxf(m, lse_col[static_cast<long long>(s) * p.rows_cap]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));

  LseMerge merge(m);
  float4 acc[kVDim / 128];
#pragma unroll
  for (int i = 0; i < kVDim / 128; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (!merge.Empty()) {
    for (int s = 0; s < states; ++s) {
      const float w = merge.Add(lse_col[static_cast<long long>(s) * p.rows_cap]);
      if (w == 0.f) continue;  // empty (never written rows are never read) or negligible
      const float4* src = reinterpret_cast<const float4*>(
          p.part_o + ((first + s) * p.rows_cap + row) * static_cast<long long>(kVDim));
#pragma unroll
      for (int i = 0; i < kVDim / 128; ++i) {
        const float4 v = src[lane + 32 * i];
        acc[i].x += w * v.x;
        acc[i].y += w * v.y;
        acc[i].z += w * v.z;
        acc[i].w += w * v.w;
      }
    }
  }
  const float inv = merge.Empty() ? 0.f : 1.f / merge.weight_sum;
  const long long n = rq.q0 + row / kHeads;
  const int h = row % kHeads;
  unsigned short* dst = p.o + n * p.o_stride_n + h * p.o_stride_h;
#pragma unroll
  for (int i = 0; i < kVDim / 128; ++i) {
    const uint2 packed = make_uint2(PackBf16x2(acc[i].x * inv, acc[i].y * inv),
                                    PackBf16x2(acc[i].z * inv, acc[i].w * inv));
    *reinterpret_cast<uint2*>(dst + (lane + 32 * i) * 4) = packed;
  }
  if (p.lse != nullptr && lane == 0) p.lse[n * kHeads + h] = merge.LseNatural();
}

}  // namespace mla
}  // namespace kjit
