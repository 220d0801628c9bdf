// kernel_bench --proxy sm_120: the sm_120 code path run on this GPU as the RTX PRO 6000 would run
// it. The split kernel is the sm_120 tile (mma.sync, no wgmma, <= 99 KB per CTA: the same source and
// template the sm_120 build compiles); the plan is made for the target (its SM count, compute
// capability and per-block shared memory); each kernel's dynamic shared memory request is padded
// so that this GPU keeps as many CTAs per SM as the target's 100 KB per SM allows; and each row is
// projected onto the target with proxy_model.h's model.
#pragma once

#include <string>

#include "bench/kernel_bench/proxy_model.h"
#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/catalog.h"
#include "runtime/kernels/mla_verify/args.h"

namespace kjit::bench {

struct ProxyResidency {
  int split_target = 0, split_here = 0;      // CTAs per SM of the split kernel
  int combine_target = 0, combine_here = 0;  // and of the combine
  long split_ctas = 0;
};

class Proxy {
 public:
  static StatusOr<Proxy> Create(const driver::DeviceInfo& here, const TargetGpu& target);

  // Pads plan's dynamic shared memory requests; the residency reached (Internal when this GPU
  // cannot be held to the target's).
  StatusOr<ProxyResidency> MatchResidency(const kernels::KernelTable& table, kernels::MlaVerifyPlan* plan) const;

  // The proxy's columns of one row, from the graph-replay time measured here at SM clock `hz`.
  std::string Columns(const ProxyResidency& r, double flops, double bytes, double measured_s, double hz) const;
  std::string Preamble() const;
  static std::string HeaderColumns();
  static std::string HeaderRule();

  driver::DeviceInfo plan_device;  // what the plan sees: the target
  TargetGpu target;

 private:
  int sms_ = 0;
  SmLimits here_;
};

}  // namespace kjit::bench
