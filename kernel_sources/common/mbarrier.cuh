// Shared-memory mbarriers (sm_90+): arrival-count barriers with phases, for producer/consumer
// hand-overs between warpgroups that must not stall each other (a named barrier makes the arriving
// side wait for nothing but needs the waiting side at the same point; an mbarrier lets either side
// run ahead by one phase). Also the per-warp register reallocation of warp-specialized kernels.
#pragma once

namespace kjit {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// One thread initializes; the CTA synchronizes before anyone else uses the barrier.
__device__ __forceinline__ void MbarInit(unsigned addr, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(addr), "r"(count) : "memory");
}

// One arrival (release: this thread's earlier writes, and what it has observed, are visible to a
// thread that sees the phase complete).
__device__ __forceinline__ void MbarArrive(unsigned addr) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}" ::"r"(addr) : "memory");
}

// One arrival that happens when every cp.async this thread has issued so far has landed. noinc: the
// arrival counts toward the barrier's expected count (MbarInit's count includes it).
__device__ __forceinline__ void CpAsyncMbarArrive(unsigned addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(addr) : "memory");
}

// Waits (acquire) until the phase with parity `parity` has completed: phase k of a barrier is its
// k-th completion, so the n-th use of a buffer waits with parity n & 1.
__device__ __forceinline__ void MbarWait(unsigned addr, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// sm_90a. Every warp of a warpgroup executes these together: the warpgroup gives registers back to the
// CTA's pool (dec) or takes them from it (inc) so a producer warpgroup can run with few registers
// and the consumers with more than an even split allows.
template <int kRegs>
__device__ __forceinline__ void WarpgroupRegsDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void WarpgroupRegsInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

#endif

}  // namespace kjit
