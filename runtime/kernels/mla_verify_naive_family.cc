#include "runtime/kernels/catalog.h"
#include "runtime/kernels/mla_verify_naive.h"

namespace kjit::kernels {

// One program per mask kind; H and the sizes are run-time values for the oracle.
std::vector<Specialization> MlaVerifyNaiveSpecializations() {
  std::vector<Specialization> specs;
  for (MaskKind mask : {MaskKind::kBool, MaskKind::kPacked}) {
    Specialization s;
    s.family = std::string(kMlaVerifyNaiveFamily);
    s.name = std::string(MlaVerifyNaiveSpecialization(mask));
    s.entry_source = std::string(kMlaVerifyNaiveSource);
    s.name_expressions = {std::string(MlaVerifyNaiveNameExpression(mask))};
    specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace kjit::kernels
