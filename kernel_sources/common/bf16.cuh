// bf16 and f16 conversions and packing without cuda_bf16.h (keeps NVRTC programs small and
// header-free).
#pragma once

namespace kjit {

// Two floats -> one 32-bit word of bf16 (lo in the low half), round to nearest even.
__device__ __forceinline__ unsigned PackBf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// The low and high bf16 of a 32-bit word, as floats.
__device__ __forceinline__ float Bf16Lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float Bf16Hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// 2^k for k in [-126, 127].
__device__ __forceinline__ float Pow2(int k) { return __uint_as_float(static_cast<unsigned>(k + 127) << 23); }

// The power-of-two scale that makes f16 hold a row whose largest |value| is m: 2^e * m in
// [2^14, 2^15) (e = 0 for zero, infinite or NaN m; e in [-113, 141], so apply it as two factors).
__device__ __forceinline__ int F16RowScaleExponent(float m) {
  const int biased = static_cast<int>((__float_as_uint(m) >> 23) & 0xffu);
  return m == 0.f || biased == 255 ? 0 : 141 - biased;
}

// Two floats -> one 32-bit word of f16 (lo in the low half), round to nearest even.
__device__ __forceinline__ unsigned PackF16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace kjit
