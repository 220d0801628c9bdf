// Named barriers (a subset of a CTA's warps synchronizes without stalling the others) and the
// programmatic-dependent-launch controls.
#pragma once

namespace kjit {

// id 0 is __syncthreads'; callers use 1..15. `threads` is a multiple of 32.
__device__ __forceinline__ void NamedBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at named barrier `id` without waiting: the producer side of a barrier that other warps
// NamedBarrier on (`threads` counts both sides).
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Programmatic dependent launch (sm_90+; no-ops before): a primary kernel lets the next kernel in
// the stream start launching (its CTAs land on SMs the primary leaves idle), and the dependent
// waits until the primary grid has completed and its memory is visible before reading its results.
// A dependent launched without the attribute, or with no primary, passes the wait at once.
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void WaitForPrimaryGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace kjit
