#include "bench/kernel_bench/proxy_model.h"

#include <algorithm>

namespace kjit::bench {
namespace {
constexpr int kReservedSmemPerCta = 1024;
int RoundUp(int v, int unit) { return (v + unit - 1) / unit * unit; }
}  // namespace

TargetGpu RtxPro6000() {
  TargetGpu t;
  t.name = "RTX PRO 6000 Blackwell (sm_120)";
  t.sms = 188;
  t.clock_hz = 2.6e9;
  t.dram_bytes_per_s = 1792e9;
  t.mma_flop_per_smclk = 1024;
  t.sm = {.smem_per_sm = 100 * 1024, .smem_per_block = 101376, .regs_per_sm = 65536, .threads_per_sm = 1536,
          .max_ctas_per_sm = 24};
  t.cc_major = 12;
  t.cc_minor = 0;
  return t;
}

int CtasPerSm(const CtaResources& cta, const SmLimits& sm) {
  if (cta.threads <= 0) return 0;
  const int smem = cta.static_smem + cta.dynamic_smem + kReservedSmemPerCta;
  const int warps = (cta.threads + 31) / 32;
  const int regs = warps * RoundUp(std::max(1, cta.registers) * 32, 256);
  const int n = std::min({sm.smem_per_sm / smem, sm.regs_per_sm / regs, sm.threads_per_sm / cta.threads,
                          sm.max_ctas_per_sm});
  return std::max(0, n);
}

int PaddedDynamicSmem(const CtaResources& cta, int ctas, const SmLimits& here) {
  if (ctas < 1) return -1;
  if (CtasPerSm(cta, here) <= ctas) return cta.dynamic_smem;
  // Smallest d with smem_per_sm / (fixed + d) <= ctas, i.e. fixed + d > smem_per_sm / (ctas + 1).
  const int fixed = cta.static_smem + kReservedSmemPerCta;
  const int d = here.smem_per_sm / (ctas + 1) + 1 - fixed;
  if (d + cta.static_smem > here.smem_per_block) return -1;
  return std::max(d, cta.dynamic_smem);
}

Projection Project(double flops, double bytes, double measured_s, int measured_sms, double measured_clock_hz,
                   const TargetGpu& target) {
  Projection p;
  const double smclk = measured_s * measured_sms * measured_clock_hz;
  if (smclk <= 0) return p;
  p.flop_per_smclk = flops / smclk;
  p.bytes_per_smclk = bytes / smclk;
  p.scaled_s = smclk / (static_cast<double>(target.sms) * target.clock_hz);
  const double mem_s = bytes / target.dram_bytes_per_s;
  const double mma_s = flops / (target.mma_flop_per_smclk * target.sms * target.clock_hz);
  p.floor_s = std::max(mem_s, mma_s);
  p.bound = mem_s >= mma_s ? "memory" : "compute";
  p.projected_s = std::max(p.scaled_s, p.floor_s);
  p.ratio = p.floor_s > 0 ? p.projected_s / p.floor_s : 0;
  return p;
}

double WaveProjectedSeconds(double measured_s, double measured_clock_hz, long ctas, int ctas_per_sm, int measured_sms,
                            const TargetGpu& target, double floor_s) {
  if (ctas <= 0 || ctas_per_sm <= 0 || measured_sms <= 0 || target.sms <= 0) return 0;
  auto waves = [&](long slots) { return static_cast<double>((ctas + slots - 1) / slots); };
  const double scaled = measured_s * (measured_clock_hz / target.clock_hz) *
                        waves(static_cast<long>(target.sms) * ctas_per_sm) /
                        waves(static_cast<long>(measured_sms) * ctas_per_sm);
  return std::max(scaled, floor_s);
}

}  // namespace kjit::bench
