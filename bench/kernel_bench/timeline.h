// kernel_bench --timeline: per-CTA timestamps of one launch configuration (the mla_verify programs
// compiled with -DKJIT_TIMELINE=1, kernel_sources/mla_verify/timeline.cuh), summarized as a
// markdown table: for each point the median over CTAs (prefix and tree CTAs apart) and over
// launches, in us from the first split CTA's entry; the last split CTA's exit; the combine's entry,
// wait and last exit. sm_hz converts the stamps' SM cycles into time.
#pragma once

#include <functional>
#include <string>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/catalog.h"
#include "runtime/kernels/mla_verify/args.h"

namespace kjit::bench {

StatusOr<std::string> MeasureTimeline(const kernels::KernelTable& table, const kernels::MlaVerifyPlan& plan,
                                      CUstream stream, int launches, double sm_hz,
                                      const std::function<Status(int)>& launch);

}  // namespace kjit::bench
