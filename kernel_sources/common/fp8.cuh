// fp8 e4m3 (OCP "float8_e4m3fn": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; exponent 0
// holds the subnormals m/8 * 2^-6; 0x7f and 0xff are NaN; no infinities) to and from bf16, without
// cuda_fp8.h. Every e4m3 value is a bf16 value, so the decode is exact.
#pragma once

#include "common/bf16.cuh"

namespace kjit {

// Two e4m3 bytes placed in bits 15..8 and 31..24 of x -> bf16x2 bits, NaN aside (before sm_89, and
// the fp8 numerics' rounding on every arch). The bytes' seven
// magnitude bits become a bf16's exponent and top mantissa bits, which is the e4m3 value times
// 2^-120 (normals and subnormals alike: bf16 arithmetic keeps subnormals), and one bf16x2 multiply
// by 2^120 (bf16 bits 0x7b80) is exact.
__device__ __forceinline__ unsigned E4m3PairHighBytesToBf16x2(unsigned x) {
  const unsigned bits = (x & 0x80008000u) | ((x >> 4) & 0x07f007f0u);
  unsigned r;
  // fma with -0 as the addend: a * b + (-0) is a * b for every a, b (also -0 and +0).
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(bits), "r"(0x7b807b80u), "r"(0x80008000u));
  return r;
}

// Four e4m3 bytes (byte 0 lowest) -> four bf16 (lo: bytes 0, 1; hi: bytes 2, 3), exact; NaN bytes
// give the bf16 quiet NaN of their sign.
__device__ __forceinline__ void E4m3x4ToBf16(unsigned w, unsigned& lo, unsigned& hi) {
  lo = E4m3PairHighBytesToBf16x2(__byte_perm(w, 0u, 0x1404));
  hi = E4m3PairHighBytesToBf16x2(__byte_perm(w, 0u, 0x3424));
  // A byte whose low seven bits are all set is NaN: +1 carries into its bit 7 and no further.
  const unsigned nan = ((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
  if (nan != 0u) {
    const unsigned sign = w & 0x80808080u;
    auto fix = [](unsigned v, unsigned nan2, unsigned sign2) {  // bytes k = 0, 1 of nan2 / sign2
      if (nan2 & 0x80u) v = (v & 0xffff0000u) | 0x7fc0u | ((sign2 & 0x80u) << 8);
      if (nan2 & 0x8000u) v = (v & 0x0000ffffu) | 0x7fc00000u | ((sign2 & 0x8000u) << 16);
      return v;
    };
    lo = fix(lo, nan, sign);
    hi = fix(hi, nan >> 16, sign >> 16);
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// sm_89 and later: the hardware conversion e4m3x2 -> f16x2 (exact: every e4m3 value is a normal f16
// or zero; NaN stays NaN), then f16 -> f32 -> bf16 (exact: the value has three mantissa bits). On
// the H200 this is about twice as fast as the bit arithmetic below, whose bf16x2 multiply is the
// slow part: the same bit trick on the f16 (shift, then a bf16x2 multiply by 2^112) measured K2
// 113 us against 65 us (bench/results/kernel_bench-2026-12-02-h200-fp8.md).
__device__ __forceinline__ unsigned E4m3x2ToF16x2(unsigned short pair) {
  unsigned h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(pair));
  return h;
}
__device__ __forceinline__ unsigned E4m3x2ToBf16x2Cvt(unsigned short pair) {
  const unsigned h = E4m3x2ToF16x2(pair);
  float lo, hi;
  asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(static_cast<unsigned short>(h & 0xffffu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(static_cast<unsigned short>(h >> 16)));
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#else
// Before sm_89 the same f16 values by bit arithmetic, NaN aside (the e4m3 value times 2^-8 as f16
// bits, then an exact multiply by 2^8); no tile plans an fp8 cache with these there.
__device__ __forceinline__ unsigned E4m3x2ToF16x2(unsigned short pair) {
  const unsigned x = __byte_perm(static_cast<unsigned>(pair), 0u, 0x1404);
  const unsigned bits = (x & 0x80008000u) | ((x >> 1) & 0x3f803f80u);
  unsigned r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(bits), "r"(0x5c005c00u));
  return r;
}
#endif

#ifndef KJIT_FP8_DECODE
#define KJIT_FP8_DECODE 0
#endif

// Eight e4m3 bytes (lo word first) -> eight bf16 as one 16-byte chunk; NaN bytes give bf16 NaN.
// KJIT_FP8_DECODE (experiments only, kernel_bench --define; 0 in production): 8 = the f16 bits as
// they are and 9 = the bytes spread without decoding, both wrong values: bounds on what any decode
// costs (bench/results/kernel_bench-2026-12-04-h200-fp8-producer.md).
__device__ __forceinline__ uint4 E4m3x8ToBf16(uint2 v) {
  uint4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && KJIT_FP8_DECODE == 8
  r.x = E4m3x2ToF16x2(static_cast<unsigned short>(v.x & 0xffffu));
  r.y = E4m3x2ToF16x2(static_cast<unsigned short>(v.x >> 16));
  r.z = E4m3x2ToF16x2(static_cast<unsigned short>(v.y & 0xffffu));
  r.w = E4m3x2ToF16x2(static_cast<unsigned short>(v.y >> 16));
#elif KJIT_FP8_DECODE == 9
  r.x = __byte_perm(v.x, 0u, 0x1404);
  r.y = __byte_perm(v.x, 0u, 0x3424);
  r.z = __byte_perm(v.y, 0u, 0x1404);
  r.w = __byte_perm(v.y, 0u, 0x3424);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  r.x = E4m3x2ToBf16x2Cvt(static_cast<unsigned short>(v.x & 0xffffu));
  r.y = E4m3x2ToBf16x2Cvt(static_cast<unsigned short>(v.x >> 16));
  r.z = E4m3x2ToBf16x2Cvt(static_cast<unsigned short>(v.y & 0xffffu));
  r.w = E4m3x2ToBf16x2Cvt(static_cast<unsigned short>(v.y >> 16));
#else
  E4m3x4ToBf16(v.x, r.x, r.y);
  E4m3x4ToBf16(v.y, r.z, r.w);
#endif
  return r;
}

// float -> the nearest e4m3 value (ties to even, saturating at +-448), as a float. sm_89 and later
// convert in hardware; earlier arches round the float's bits the same way.
__device__ __forceinline__ unsigned RoundToE4m3PairBf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  unsigned r = E4m3PairHighBytesToBf16x2(__byte_perm(static_cast<unsigned>(pair), 0u, 0x1404));
  // satfinite keeps NaN as the e4m3 NaN byte, which the bit arithmetic reads as 480: NaN stays NaN.
  if (lo != lo) r = (r & 0xffff0000u) | 0x7fc0u;
  if (hi != hi) r = (r & 0x0000ffffu) | 0x7fc00000u;
  return r;
#else
  auto round1 = [](float x) {
    const float a = fminf(fabsf(x), 448.f);
    float r;
    if (a < 0.015625f) {  // 2^-6: the subnormal range, a quantum of 2^-9
      r = rintf(a * 512.f) * (1.f / 512.f);
    } else {  // three mantissa bits: round the float's 23 to 3, ties to even
      unsigned u = __float_as_uint(a);
      u += 0x7ffffu + ((u >> 20) & 1u);
      r = __uint_as_float(u & 0xfff00000u);
    }
    r = fminf(r, 448.f);
    return x != x ? x : copysignf(r, x);
  };
  unsigned out;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(round1(hi)), "f"(round1(lo)));
  return out;
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// Two floats -> their nearest e4m3 values (ties to even, saturating at +-448; NaN stays NaN) as two
// bytes, lo in the low one. sm_89 and later.
__device__ __forceinline__ unsigned short RoundToE4m3x2(float lo, float hi) {
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  return pair;
}
#endif

// Two floats -> their nearest e4m3 values (as above) as f16x2 (exact: every e4m3 value is an f16).
__device__ __forceinline__ unsigned RoundToE4m3PairF16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return E4m3x2ToF16x2(RoundToE4m3x2(lo, hi));
#else
  const unsigned b = RoundToE4m3PairBf16x2(lo, hi);
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(Bf16Hi(b)), "f"(Bf16Lo(b)));
  return r;
#endif
}

// Four bf16 (two bf16x2 words, lower element first) -> their nearest e4m3 values (as above) packed
// in one word, lowest byte first: an operand word of the e4m3 mma.sync. sm_89 and later (never called
// before: no tile runs e4m3 MMAs there).
__device__ __forceinline__ unsigned RoundBf16x4ToE4m3x4(unsigned w0, unsigned w1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const unsigned short lo = RoundToE4m3x2(Bf16Lo(w0), Bf16Hi(w0)), hi = RoundToE4m3x2(Bf16Lo(w1), Bf16Hi(w1));
  return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
#else
  (void)w0;
  (void)w1;
  return 0u;
#endif
}

// Rounds one 16-byte chunk of eight bf16 in place to the nearest e4m3 values (fp8 numerics' q).
__device__ __forceinline__ uint4 RoundBf16x8ToE4m3(uint4 v) {
  uint4 r;
  r.x = RoundToE4m3PairBf16x2(Bf16Lo(v.x), Bf16Hi(v.x));
  r.y = RoundToE4m3PairBf16x2(Bf16Lo(v.y), Bf16Hi(v.y));
  r.z = RoundToE4m3PairBf16x2(Bf16Lo(v.z), Bf16Hi(v.z));
  r.w = RoundToE4m3PairBf16x2(Bf16Lo(v.w), Bf16Hi(v.w));
  return r;
}

}  // namespace kjit
