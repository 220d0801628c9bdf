// The sm_120 proxy's arithmetic (kernel_bench --proxy sm_120), plain C++ so that it is unit-tested
// on CPU: the target GPU's facts, how many CTAs of a kernel the target keeps per SM and the shared
// memory request that makes the measuring GPU keep the same number, and the projection of a time
// measured on the measuring GPU onto the target.
//
// The projection is a model, and is labelled as one wherever it is printed: the kernel keeps, per
// SM and per SM clock, the throughput it reached on the measuring GPU, with the target's residency
// and a plan made for the target's SM count; the target's time is that throughput over its SMs at
// its clock, never below its floor (DRAM bytes at its bandwidth, FLOPs at its mma.sync peak). What
// it does not model: the target's memory latencies and L2 (GDDR7 and a 128 MB L2 against HBM3e and
// 50 MB), its mma.sync issue rate per SM clock where the measuring GPU's is higher (the projection
// is then capped by the target's peak, not derived from it), and wave quantization, which differs
// because the grid planned for the target's SMs runs on fewer SMs here (both wave counts are
// reported).
#pragma once

#include <string>

namespace kjit::bench {

// What bounds the CTAs an SM keeps.
struct SmLimits {
  int smem_per_sm = 0;     // bytes of shared memory per SM
  int smem_per_block = 0;  // the per-block opt-in limit
  int regs_per_sm = 0;
  int threads_per_sm = 0;
  int max_ctas_per_sm = 0;
};

struct TargetGpu {
  std::string name;
  int sms = 0;
  double clock_hz = 0;            // SM clock the projection assumes
  double dram_bytes_per_s = 0;
  double mma_flop_per_smclk = 0;  // bf16 mma.sync with fp32 accumulation, dense
  SmLimits sm;
  int cc_major = 0, cc_minor = 0;
};

// RTX PRO 6000 Blackwell (GB202, sm_120): 188 SMs, ~2.6 GHz boost, 1792 GB/s, 100 KB of shared
// memory per SM and 99 KB per block, 64K registers and 1536 threads per SM, 1024 bf16 FLOP per
// SM clock.
TargetGpu RtxPro6000();

// Per-CTA resources of one kernel launch.
struct CtaResources {
  int threads = 0;
  int registers = 0;      // per thread
  int static_smem = 0;    // bytes
  int dynamic_smem = 0;   // bytes requested by the launch
};

// CTAs of `cta` resident per SM under `sm` (1 KB of shared memory per CTA is kept by the system on
// sm_80 and later; registers are allocated per warp in units of 256).
int CtasPerSm(const CtaResources& cta, const SmLimits& sm);

// The dynamic shared memory to request on the measuring GPU (limits `here`) so that it keeps no
// more than `ctas` CTAs per SM: the request unchanged when its limits already hold it there, else
// the smallest larger one that does. -1 when no request within the per-block limit does, or for
// ctas < 1.
int PaddedDynamicSmem(const CtaResources& cta, int ctas, const SmLimits& here);

struct Projection {
  double flop_per_smclk = 0;   // measured: FLOPs / (time * SMs * clock)
  double bytes_per_smclk = 0;  // measured: model DRAM bytes / (time * SMs * clock)
  double scaled_s = 0;         // the same per-SM-clock throughput on the target's SMs and clock
  double floor_s = 0;          // the target's floor
  double projected_s = 0;      // max(scaled, floor)
  double ratio = 0;            // projected / floor
  std::string bound;           // "memory" or "compute": which floor term is larger
};

Projection Project(double flops, double bytes, double measured_s, int measured_sms, double measured_clock_hz,
                   const TargetGpu& target);

// A second model, for grids of equal CTAs: the launch's time is its split kernel's waves times one
// CTA's time, and a CTA takes the same SM cycles on both GPUs. The target's time is then the time
// measured here, scaled by the clocks and by the ratio of the waves (ceil(ctas / (sms * ctas per
// SM)) on each GPU), never below the target's floor. Where the grid planned for the target fills
// one wave there and two here, the first model charges the target for the second wave's idle SMs
// here; where the grid fills fewer SMs than the target has, it credits the target with SMs that
// would idle.
double WaveProjectedSeconds(double measured_s, double measured_clock_hz, long ctas, int ctas_per_sm, int measured_sms,
                            const TargetGpu& target, double floor_s);

}  // namespace kjit::bench
