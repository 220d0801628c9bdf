// Named barriers: a subset of a CTA's warps synchronizes without stalling the others.
#pragma once

namespace kjit {

// id 0 is __syncthreads'; callers use 1..15. `threads` is a multiple of 32.
__device__ __forceinline__ void NamedBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace kjit
