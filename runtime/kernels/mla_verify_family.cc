#include <string_view>

#include "kernel_sources/mla_verify/traits.h"
#include "runtime/kernels/catalog.h"
#include "runtime/kernels/mla_verify_plan.h"

namespace kjit::kernels {

// One program per (H, mask kind): the split kernel and the combine. The tile is the compiled
// arch's (mla::UsesLargeTile), so the same specializations serve sm_90 and sm_120.
std::vector<Specialization> MlaVerifySpecializations() {
  std::vector<Specialization> specs;
  for (int heads : {8, 16, 32, 64, 128}) {
    for (MaskKind mask : {MaskKind::kBool, MaskKind::kPacked}) {
      Specialization s;
      s.family = std::string(kMlaVerifyFamily);
      s.name = MlaVerifySpecializationName(heads, mask);
      s.entry_source = std::string(kMlaVerifySource);
      s.name_expressions = {MlaVerifySplitExpression(heads, mask), MlaVerifyCombineExpression(heads)};
      s.max_dynamic_smem = [](std::string_view arch) {
        // "sm_90", "sm_90a", "sm_120": compute capability major from the digits before the last one.
        int digits = 0;
        for (char c : arch.substr(arch.find('_') + 1)) {
          if (c < '0' || c > '9') break;
          digits = digits * 10 + (c - '0');
        }
        return MlaVerifyTileFor(digits / 10).smem_bytes;
      };
      specs.push_back(std::move(s));
    }
  }
  return specs;
}

}  // namespace kjit::kernels
