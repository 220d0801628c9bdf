// 16-byte cp.async global -> shared, with zero fill for rows that must not be read.
#pragma once

namespace kjit {

// Copies 16 bytes when `valid`, else writes 16 zero bytes and reads nothing from `src`.
__device__ __forceinline__ void CpAsync16(unsigned smem_addr, const void* src, bool valid) {
  const unsigned src_bytes = valid ? 16u : 0u;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// A plain 16-byte shared-memory store at a shared-window address.
__device__ __forceinline__ void StShared16(unsigned smem_addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Starts bringing `bytes` (a multiple of 16) at a 16-byte aligned address into L2; nothing waits.
__device__ __forceinline__ void PrefetchL2(const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
#endif

template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace kjit
