// The consumer warpgroups' pieces that both sm_90a split kernels share (split_wgmma.cuh over a bf16
// cache, split_wgmma_fp8.cuh on e4m3 MMAs): O's rescale, a tile's online softmax and the epilogue.
// Register accumulators follow wgmma.cuh's layout: this thread's rows row0 = 16 * warp + lane / 4
// and row0 + 8 of its warpgroup's 64.
#pragma once

#include "common/bf16.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "common/sync.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"
#include "mla_verify/timeline.cuh"
#include "mla_verify/traits.h"

namespace kjit {
namespace mla {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// O (64 x 256 fp32 of this warpgroup) times each row's factor: plain register multiplies, skipped
// when the warp's factors are all 1 (most tiles: lazy max). No wgmma may be in flight here (ptxas
// would insert a wait inside this warp-divergent branch): callers have waited for every group they
// issued.
__device__ __forceinline__ void WgmmaRescaleO(float (&o)[128], float a0, float a1) {
  if (__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= a0;
      o[4 * j + 1] *= a0;
      o[4 * j + 2] *= a1;
      o[4 * j + 3] *= a1;
    }
  }
}

// The online softmax of a 64 x 64 S tile in the wgmma accumulator layout, for this thread's rows
// h = 0, 1 (row0, row0 + 8): scores times `scale`, the columns whose bit in valid_bits(h)[c / 32]
// is clear masked; against the running max (LazyMaxUpdate) s becomes P in fp32, alpha[h] the
// rescale of O and of the row sum, l_own the row sum of this warpgroup's tiles.
template <class ValidBits>
__device__ __forceinline__ void WgmmaTileSoftmax(float (&s)[32], ValidBits&& valid_bits, float scale, int lane,
                                                 float (&m_run)[2], float (&l_own)[2], float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const unsigned* vb = valid_bits(h);
    const unsigned vbits[2] = {vb[0], vb[1]};
    float mx = NegInf();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * j + 2 * (lane & 3) + e;
        const bool valid = (vbits[col >> 5] >> (col & 31)) & 1u;
        const float v = valid ? s[4 * j + 2 * h + e] * scale : NegInf();
        s[4 * j + 2 * h + e] = v;
        mx = fmaxf(mx, v);
      }
    }
    mx = QuadMax(mx);
    const float m_use = LazyMaxUpdate(m_run[h], mx, alpha[h]);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pv = FastExp2(s[4 * j + 2 * h + e] - m_use);
        s[4 * j + 2 * h + e] = pv;
        sum += pv;
      }
    }
    l_own[h] = l_own[h] * alpha[h] + sum;
  }
}

// The consumers' epilogue, after the named barrier that makes both warpgroups' row sums visible
// (and follows every wgmma): the normalized partial O (times v_scale) through shared memory
// (`stage_o`, 64 KB no longer read: rows of 1 KB with 16-byte chunks XOR-swizzled by row % 8), then
// written with coalesced 16-byte stores; the LSE from warpgroup 0.
__device__ __forceinline__ void WgmmaWriteState(const MlaVerifyParams& p, int b, int split, float v_scale,
                                                float (&o)[128], const float (*row_sums)[64], const float (&m_run)[2],
                                                unsigned char* stage_o, int m0, int rows_b, int wg, int wq, int lane,
                                                int tid) {
  constexpr int kConsumers = 256, kRows = 64;
  constexpr int kBarConsumers = 4;
  const int row0 = 16 * wq + (lane >> 2);
  // Computed here: holding these two pointers through the loop made ptxas spill.
  const StateRows state = StateOf(p, b, split);
  float* part_lse = state.lse;
  unsigned short* part_o = state.o;

  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    const float l = row_sums[0][row] + row_sums[1][row];
    inv[h] = l > 0.f ? v_scale / l : 0.f;
    if (wg == 0 && (lane & 3) == 0 && m0 + row < rows_b)
      part_lse[m0 + row] = l > 0.f ? m_run[h] + __log2f(l) : NegInf();
  }
  // stmatrix: the warp's 16 rows x 16 columns per instruction, as four 8x8 matrices (rows 0-7 and
  // 8-15 of chunk 32wg + j, then of chunk j + 1); lane L gives the address of row L % 8 of matrix
  // L / 8, whose chunk lands at its swizzled place.
  {
    const int mat = lane >> 3, r8 = lane & 7;
    const unsigned row_addr = SmemAddr(stage_o) + (16 * wq + 8 * (mat & 1) + r8) * 1024;
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const int chunk = 32 * wg + j + (mat >> 1);
      StMatrixX4(row_addr + ((chunk ^ r8) << 4), PackBf16x2(o[4 * j] * inv[0], o[4 * j + 1] * inv[0]),
                 PackBf16x2(o[4 * j + 2] * inv[1], o[4 * j + 3] * inv[1]),
                 PackBf16x2(o[4 * j + 4] * inv[0], o[4 * j + 5] * inv[0]),
                 PackBf16x2(o[4 * j + 6] * inv[1], o[4 * j + 7] * inv[1]));
    }
  }
  NamedBarrier(kBarConsumers, kConsumers);
  KJIT_STAMP(kTlStaged);
  const int rows = rows_b - m0 < kRows ? rows_b - m0 : kRows;
  uint4* out = reinterpret_cast<uint4*>(part_o + static_cast<long long>(m0) * kVDim);
  for (int i = tid; i < rows * 64; i += kConsumers) {
    const int row = i >> 6, chunk = i & 63;
    out[i] = *reinterpret_cast<const uint4*>(stage_o + row * 1024 + ((chunk ^ (row & 7)) << 4));
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace mla
}  // namespace kjit
