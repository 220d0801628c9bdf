// Online-softmax pieces in the log2 domain (scores pre-multiplied by scale * log2(e)).
// A row that has seen only masked scores keeps max = -inf and sum = 0; it must never produce NaN.
#pragma once

namespace kjit {

__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;  // ex2(-inf) = +0
}

__device__ __forceinline__ float NegInf() { return __int_as_float(0xff800000); }

// The max to subtract: 0 while the row has no finite score, so exp2(-inf - 0) = 0, never NaN.
__device__ __forceinline__ float SafeMax(float m) { return m == NegInf() ? 0.f : m; }

// Whether LazyMaxUpdate keeps the running max m_run against a tile whose max is tile_max (log2
// units): the tile exceeds it by at most 8 (p <= 2^8 is exact enough in fp32 and bf16). False
// while the row has seen no finite score (-inf - -inf is NaN) and for a NaN running max.
__device__ __forceinline__ bool LazyMaxKeeps(float m_run, float tile_max) {
  return fmaxf(m_run, tile_max) - m_run <= 8.f;
}

// One tile's update of a row's running max m_run given the tile's max. Lazy (LazyMaxKeeps), so
// alpha (the rescale of the row's O and sum) is exactly 1 on most tiles. Every thread that sees
// the same values takes the same decision; an all-masked row stays at -inf. Returns the max to
// subtract from this tile's scores.
__device__ __forceinline__ float LazyMaxUpdate(float& m_run, float tile_max, float& alpha) {
  const float m_tile = fmaxf(m_run, tile_max);
  const float m_new = LazyMaxKeeps(m_run, tile_max) ? m_run : m_tile;
  const float m_use = SafeMax(m_new);
  alpha = FastExp2(m_run - m_use);
  m_run = m_new;
  return m_use;
}

// Max over the four lanes of a quad (the lanes sharing a row of an mma C fragment).
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace kjit
