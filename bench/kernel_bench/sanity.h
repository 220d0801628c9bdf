// Before timing: the fast kernel's output on small cases must match the float64 reference.
#pragma once

#include <cuda.h>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/catalog.h"

namespace kjit::bench {

// Runs a few reference cases (chain and random trees, bool and packed masks, padded requests, odd
// P) through PlanMlaVerify + LaunchMlaVerify with the given MlaVerifyPlanOptions::tile; Internal
// with the comparison's description on a miss.
Status CheckAgainstReference(const kernels::KernelTable& kernels, const driver::DeviceInfo& dev, CUstream stream,
                             int tile);

}  // namespace kjit::bench
