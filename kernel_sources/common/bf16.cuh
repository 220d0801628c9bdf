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

// Two floats -> one 32-bit word of f16 (lo in the low half), round to nearest even.
__device__ __forceinline__ unsigned PackF16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace kjit
