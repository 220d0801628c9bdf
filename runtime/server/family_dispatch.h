// Plan and launch entry points of the kernel families that serve the mla_verify schema.
#pragma once

#include <string_view>

#include "runtime/kernels/catalog.h"
#include "runtime/kernels/mla_verify_args.h"
#include "runtime/driver/cuda_driver.h"

namespace kjit::server {

struct MlaVerifyFamily {
  StatusOr<kernels::MlaVerifyPlan> (*plan)(const kernels::MlaVerifyProblem&, const driver::DeviceInfo&);
  Status (*launch)(const kernels::KernelTable&, const kernels::MlaVerifyPlan&,
                   const kernels::MlaVerifyProblem&, const kernels::MlaVerifyBuffers&, CUstream);
  bool error_word_mappable = false;  // accepts MlaVerifyBuffers::error_word (mla_verify)
};

// UNIMPLEMENTED for a family that does not serve this schema.
StatusOr<MlaVerifyFamily> FindMlaVerifyFamily(std::string_view family);

}  // namespace kjit::server
