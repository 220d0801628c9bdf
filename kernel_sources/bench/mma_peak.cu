// Register-only mma.sync.m16n8k16 bf16 throughput: the compute ceiling the kernel roofline uses.
// Every warp runs kChains independent accumulator chains so the tensor pipe never waits on a
// dependency; operands come from registers (no shared or global traffic inside the loop).
#include "common/mma.cuh"

namespace kjit {
namespace bench {

constexpr int kChains = 8;

// FLOPs = gridDim.x * blockDim.x / 32 * iters * kChains * 2 * 16 * 8 * 16.
__global__ void __launch_bounds__(256) MmaPeak(int iters, float* out) {
  unsigned a[4];
  const unsigned seed = threadIdx.x * 2654435761u + blockIdx.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = (seed >> i) & 0x3f803f80u;  // small bf16 values, no overflow
  const unsigned b0 = a[0] ^ 0x00010001u, b1 = a[1] ^ 0x00020002u;
  float c[kChains][4];
#pragma unroll
  for (int k = 0; k < kChains; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[k][e] = 0.f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < kChains; ++k) MmaBf16(c[k], a, b0, b1);
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kChains; ++k) sum += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  if (sum == 12345.678f) out[0] = sum;  // practically never true; keeps the loop alive
}

}  // namespace bench
}  // namespace kjit

namespace kjit {
namespace bench {

// The SM clock: thread 0 of each CTA counts SM cycles (clock64) over at least spin_ns of
// %globaltimer; out[2 * cta] = cycles, out[2 * cta + 1] = ns.
__global__ void __launch_bounds__(32) ClockProbe(unsigned long long spin_ns, unsigned long long* out) {
  if (threadIdx.x != 0) return;
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < spin_ns);
  const long long c1 = clock64();
  out[2 * blockIdx.x] = static_cast<unsigned long long>(c1 - c0);
  out[2 * blockIdx.x + 1] = t1 - t0;
}

}  // namespace bench
}  // namespace kjit
