#include "bench/kernel_bench/proxy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kjit::bench {
namespace {

StatusOr<int> DeviceAttr(const driver::Api& api, CUdevice d, CUdevice_attribute a, const char* what) {
  int v = 0;
  KJIT_RETURN_IF_ERROR(driver::Check(api.cuDeviceGetAttribute(&v, a, d), what));
  return v;
}

StatusOr<CtaResources> Resources(const driver::Api& api, CUfunction f, const kernels::KernelGeometry& g) {
  CtaResources r;
  r.threads = static_cast<int>(g.block[0] * g.block[1] * g.block[2]);
  KJIT_RETURN_IF_ERROR(driver::Check(api.cuFuncGetAttribute(&r.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, f), "registers"));
  KJIT_RETURN_IF_ERROR(
      driver::Check(api.cuFuncGetAttribute(&r.static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f), "static smem"));
  r.dynamic_smem = static_cast<int>(g.dynamic_smem);
  return r;
}

}  // namespace

StatusOr<Proxy> Proxy::Create(const driver::DeviceInfo& here, const TargetGpu& target) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  CUdevice d = 0;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuDeviceGet(&d, here.ordinal), "proxy: device"));
  Proxy p;
  p.target = target;
  p.sms_ = here.sm_count;
  p.here_.smem_per_block = here.max_smem_per_block_optin;
  KJIT_ASSIGN_OR_RETURN(p.here_.smem_per_sm,
                        DeviceAttr(*api, d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "smem/SM"));
  KJIT_ASSIGN_OR_RETURN(p.here_.regs_per_sm,
                        DeviceAttr(*api, d, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, "regs/SM"));
  KJIT_ASSIGN_OR_RETURN(p.here_.threads_per_sm,
                        DeviceAttr(*api, d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, "threads/SM"));
  KJIT_ASSIGN_OR_RETURN(p.here_.max_ctas_per_sm,
                        DeviceAttr(*api, d, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, "CTAs/SM"));
  p.plan_device = here;
  p.plan_device.name = target.name;
  p.plan_device.cc_major = target.cc_major;
  p.plan_device.cc_minor = target.cc_minor;
  p.plan_device.arch = absl::StrCat("sm_", target.cc_major, target.cc_minor);
  p.plan_device.sm_count = target.sms;
  p.plan_device.max_smem_per_block_optin = target.sm.smem_per_block;
  return p;
}

StatusOr<ProxyResidency> Proxy::MatchResidency(const kernels::KernelTable& table, kernels::MlaVerifyPlan* plan) const {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  ProxyResidency r;
  r.split_ctas = static_cast<long>(plan->main.grid[0]) * plan->main.grid[1] * plan->main.grid[2];
  struct Kernel {
    const std::string* name;
    kernels::KernelGeometry* geometry;
    int* target;
    int* here;
  } kernels_[] = {{&plan->main_kernel, &plan->main, &r.split_target, &r.split_here},
                  {&plan->combine_kernel, &plan->combine, &r.combine_target, &r.combine_here}};
  for (Kernel& k : kernels_) {
    KJIT_ASSIGN_OR_RETURN(CUfunction f, table.Function(plan->family, plan->specialization, *k.name));
    KJIT_ASSIGN_OR_RETURN(CtaResources res, Resources(*api, f, *k.geometry));
    *k.target = CtasPerSm(res, target.sm);
    if (*k.target < 1)
      return absl::FailedPreconditionError(absl::StrCat("proxy: ", *k.name, " does not fit an SM of the target"));
    const int padded = PaddedDynamicSmem(res, *k.target, here_);
    if (padded < 0) return absl::InternalError(absl::StrCat("proxy: cannot pad ", *k.name, "'s shared memory"));
    k.geometry->dynamic_smem = static_cast<unsigned>(padded);
    res.dynamic_smem = padded;
    *k.here = CtasPerSm(res, here_);
    if (*k.here != *k.target)
      return absl::InternalError(absl::StrCat("proxy: ", *k.name, " keeps ", *k.here, " CTAs per SM here and ",
                                              *k.target, " on the target"));
  }
  return r;
}

std::string Proxy::HeaderColumns() {
  return " split CTAs | CTAs/SM | waves on 188 | waves here | SM MHz | FLOP/SM-clk | DRAM B/SM-clk | "
         "% target DRAM share | projected us (per-SM-clock model) | x target floor | projected us (wave model) | "
         "x target floor | target floor us | bound |";
}
std::string Proxy::HeaderRule() { return "---|---|---|---|---|---|---|---|---|---|---|---|---|---|"; }

std::string Proxy::Preamble() const {
  return absl::StrFormat(
      "sm_120 proxy: the split tile(s) above (mma.sync only, the code an sm_120 build runs) planned for %s (%d SMs, %.1f GHz, %.0f GB/s, %.0f bf16 FLOP per SM clock, "
      "%d KB shared memory per SM), run here with each kernel's shared memory request padded so that this GPU "
      "keeps the target's CTAs per SM. **Projected times are a model** (bench/kernel_bench/proxy_model.h): the "
      "per-SM-clock throughput measured here (graph replay, SM clock probed right after the row) on the target's "
      "%d SMs at %.1f GHz, never below the target's floor (bytes / %.0f GB/s, FLOPs at its mma.sync peak). It does "
      "not model the target's memory latencies, its L2 (128 MB against 50 MB) or wave quantization, which differs "
      "because a grid planned for %d SMs runs here on %d (both wave counts shown); where the FLOP rate per SM clock "
      "measured here exceeds the target's peak the projection is the target's compute floor, not a measurement of "
      "the target. A second projection, the wave model, scales the time measured here by the clocks and by the "
      "ratio of the split kernel's waves on the two GPUs (equal CTAs, the same SM cycles per CTA on both): it "
      "removes the second wave that a grid of one target wave takes here, and it is the better estimate where the "
      "two differ. The target's DRAM share is %.2f B per SM clock. fp8-numerics rows run their Q.K^T on e4m3 "
      "mma.sync, which sm_120 executes natively at twice the bf16 rate and sm_90 emulates with conversions and "
      "f16 MMAs: measured on an sm_90 device, their projection overstates the target's time.\n\n",
      target.name, target.sms, target.clock_hz / 1e9, target.dram_bytes_per_s / 1e9, target.mma_flop_per_smclk,
      target.sm.smem_per_sm / 1024, target.sms, target.clock_hz / 1e9, target.dram_bytes_per_s / 1e9, target.sms, sms_,
      target.dram_bytes_per_s / (target.sms * target.clock_hz));
}

std::string Proxy::Columns(const ProxyResidency& r, double flops, double bytes, double measured_s, double hz) const {
  const Projection p = Project(flops, bytes, measured_s, sms_, hz, target);
  const double waves_s = WaveProjectedSeconds(measured_s, hz, r.split_ctas, r.split_target, sms_, target, p.floor_s);
  const double share = target.dram_bytes_per_s / (target.sms * target.clock_hz);
  return absl::StrFormat(" %ld | %d | %.2f | %.2f | %.0f | %.0f | %.2f | %.0f | %.1f | %.2f | %.1f | %.2f | %.1f | %s |",
                         r.split_ctas, r.split_target, static_cast<double>(r.split_ctas) / (target.sms * r.split_target),
                         static_cast<double>(r.split_ctas) / (sms_ * r.split_here), hz / 1e6, p.flop_per_smclk,
                         p.bytes_per_smclk, 100.0 * p.bytes_per_smclk / share, p.projected_s * 1e6, p.ratio,
                         waves_s * 1e6, p.floor_s > 0 ? waves_s / p.floor_s : 0, p.floor_s * 1e6, p.bound);
}

}  // namespace kjit::bench
