// The mla_verify family: its specializations (one NVRTC program per head count and mask kind) and
// its descriptor.
#include <string_view>

#include "kernel_sources/mla_verify/traits.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/kernels/mla_verify/launch.h"
#include "runtime/kernels/mla_verify/mla_family.h"
#include "runtime/kernels/mla_verify/plan.h"
#include "runtime/kernels/registry.h"

namespace kjit::kernels {
namespace {

// "sm_90", "sm_90a", "sm_120": the compute capability major.
int CcMajor(std::string_view arch) { return ParseArch(arch).first / 10; }

StatusOr<MlaVerifyPlan> Plan(const MlaVerifyProblem& p, const driver::DeviceInfo& dev) { return PlanMlaVerify(p, dev); }

}  // namespace

// The split kernel and the combine per (H, mask kind, cache element type). With tile 0 the tile is
// the compiled arch's (mla::UsesWgmmaTile, mla::ResolvedTile), so the same specializations serve
// sm_90 and sm_120.
std::vector<Specialization> MlaVerifySpecializations(int tile) {
  std::vector<Specialization> specs;
  if (tile < 0 || tile >= mla::kNumTileIds) return specs;
  for (KvDtype kv : {KvDtype::kBf16, KvDtype::kFp8E4m3}) {
   for (int heads : {8, 16, 32, 64, 128}) {
    for (MaskKind mask : {MaskKind::kBool, MaskKind::kPacked}) {
      Specialization s;
      s.family = std::string(kMlaVerifyFamily);
      s.name = MlaVerifySpecializationName(heads, mask, tile, kv);
      s.entry_source = std::string(kMlaVerifySource);
      s.name_expressions = {MlaVerifySplitExpression(heads, mask, tile, kv), MlaVerifyCombineExpression(heads)};
      // The prefix kernel of fp8 numerics on e4m3 warpgroup MMAs (sm_90a's own tile; elsewhere it
      // compiles to an empty kernel that no plan names).
      if (kv == KvDtype::kFp8E4m3 && tile == mla::kTileArch)
        s.name_expressions.push_back(MlaVerifySplitExpression(heads, mask, tile, kv, /*fp8_mma=*/true));
      s.max_dynamic_smem = [tile, kv](std::string_view arch) {
        return MlaVerifyTileFor(CcMajor(arch), tile, kv).smem_bytes;
      };
      // The sm_90 tile uses wgmma, which exists only in the arch-specific target (the source
      // refuses plain sm_90). A cubin for sm_90a loads on every compute capability 9.0 device.
      s.target_arch = [](std::string_view arch) {
        return arch == "sm_90" ? std::string("sm_90a") : std::string(arch);
      };
      specs.push_back(std::move(s));
    }
   }
  }
  return specs;
}

std::vector<Specialization> MlaVerifyForcedTileSpecializations(int tile) {
  return tile > 0 ? MlaVerifySpecializations(tile) : std::vector<Specialization>{};
}

const KernelFamily& MlaVerifyFamily() {
  static const MlaSchemaFamily* const family = new MlaSchemaFamily(MlaFamilyOps{
      .name = kMlaVerifyFamily,
      .specializations = [] { return MlaVerifySpecializations(); },
      .check = &CheckMlaVerifyLimits,
      .plan = &Plan,
      .launch = &LaunchMlaVerify,
      .stores_error_word = true,
  });
  return *family;
}

}  // namespace kjit::kernels
