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

template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace kjit
