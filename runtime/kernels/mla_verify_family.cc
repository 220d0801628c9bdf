#include <string_view>

#include "kernel_sources/mla_verify/traits.h"
#include "runtime/kernels/catalog.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/kernels/mla_verify_plan.h"

namespace kjit::kernels {

namespace {

// "sm_90", "sm_90a", "sm_120": the compute capability major.
int CcMajor(std::string_view arch) { return ParseArch(arch).first / 10; }

std::vector<Specialization> Specs(int force_tile) {
  std::vector<Specialization> specs;
  for (int heads : {8, 16, 32, 64, 128}) {
    for (MaskKind mask : {MaskKind::kBool, MaskKind::kPacked}) {
      Specialization s;
      s.family = std::string(kMlaVerifyFamily);
      s.name = MlaVerifySpecializationName(heads, mask, force_tile);
      s.entry_source = std::string(kMlaVerifySource);
      s.name_expressions = {MlaVerifySplitExpression(heads, mask, force_tile), MlaVerifyCombineExpression(heads)};
      s.max_dynamic_smem = [force_tile](std::string_view arch) {
        return MlaVerifyTileFor(CcMajor(arch), force_tile).smem_bytes;
      };
      // The sm_90 tile uses wgmma, which exists only in the arch-specific target (the source
      // refuses plain sm_90). A cubin for sm_90a loads on every compute capability 9.0 device.
      s.target_arch = [](std::string_view arch) {
        return arch == "sm_90" ? std::string("sm_90a") : std::string(arch);
      };
      specs.push_back(std::move(s));
    }
  }
  return specs;
}

}  // namespace

// One program per (H, mask kind): the split kernel and the combine. The tile is the compiled
// arch's (mla::UsesWgmmaTile, mla::UsesLargeTile), so the same specializations serve sm_90 and sm_120.
std::vector<Specialization> MlaVerifySpecializations() { return Specs(mla::kTileArch); }

std::vector<Specialization> MlaVerifyForcedTileSpecializations(int force_tile) {
  if (force_tile <= 0 || force_tile >= mla::kNumTileIds) return {};
  return Specs(force_tile);
}

}  // namespace kjit::kernels
