// Tensor-core fragments: ldmatrix (plain and transposed), stmatrix (sm_90+) and mma.sync.m16n8k16
// bf16 or f16 -> fp32.
// Fragment layouts are PTX's: A 16x16 in 4 regs, B 16x8 in 2 regs, C 16x8 in 4 floats
// (c0,c1 at row lane/4, cols 2*(lane%4)+{0,1}; c2,c3 eight rows below).
#pragma once

namespace kjit {

__device__ __forceinline__ unsigned SmemAddr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void LdMatrixX4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void LdMatrixX2(unsigned (&r)[2], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

__device__ __forceinline__ void LdMatrixX4Trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Stores four 8x8 b16 matrices: register i of each thread holds its two elements of matrix i (the
// C-fragment layout: row lane/4, columns 2*(lane%4) and +1); lanes 8i..8i+7 give the shared address
// of matrix i's rows 0-7 (16 bytes each).
__device__ __forceinline__ void StMatrixX4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// c += a * b, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void MmaBf16(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                        unsigned b1) {
  // Not volatile: a pure register operation, so the compiler may schedule it after later ldmatrix
  // loads (which stay volatile and ordered with the barriers) and hide their latency.
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b, e4m3 inputs (m16n8k32: each operand word four bytes along k, lowest first), fp32
// accumulators. sm_89 and later (an empty statement before: no tile runs it there).
__device__ __forceinline__ void MmaE4m3(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// c += a * b, f16 inputs, fp32 accumulators (the fp8-cache tiles: every e4m3 value is an f16).
__device__ __forceinline__ void MmaF16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace kjit
