#include "runtime/server/family_dispatch.h"

#include <string>

#include "runtime/kernels/mla_verify_launch.h"
#include "runtime/kernels/mla_verify_naive.h"
#include "runtime/kernels/mla_verify_plan.h"

namespace kjit::server {

StatusOr<MlaVerifyFamily> FindMlaVerifyFamily(std::string_view family) {
  if (family == kernels::kMlaVerifyFamily) {
    return MlaVerifyFamily{&kernels::PlanMlaVerify, &kernels::LaunchMlaVerify, /*error_word_mappable=*/true};
  }
  if (family == kernels::kMlaVerifyNaiveFamily) {
    return MlaVerifyFamily{&kernels::PlanMlaVerifyNaive, &kernels::LaunchMlaVerifyNaive};
  }
  return absl::UnimplementedError(
      absl::StrCat("kernel family '", std::string(family), "' is not built into this kjitd"));
}

}  // namespace kjit::server
