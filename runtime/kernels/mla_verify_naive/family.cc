// The oracle family mla_verify_naive: one program per mask kind (H and the sizes are run-time
// values), the MLA verify schema, and its descriptor.
#include "runtime/kernels/mla_verify/mla_family.h"
#include "runtime/kernels/mla_verify_naive/naive.h"
#include "runtime/kernels/registry.h"

namespace kjit::kernels {
namespace {

std::vector<Specialization> Specializations() {
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

}  // namespace

const KernelFamily& MlaVerifyNaiveFamily() {
  static const MlaSchemaFamily* const family = new MlaSchemaFamily(MlaFamilyOps{
      .name = kMlaVerifyNaiveFamily,
      .specializations = &Specializations,
      .check = &CheckMlaVerifyNaiveLimits,
      .plan = &PlanMlaVerifyNaive,
      .launch = &LaunchMlaVerifyNaive,
      .stores_error_word = false,  // it ORs its bits atomically into the workspace's word
  });
  return *family;
}

}  // namespace kjit::kernels
