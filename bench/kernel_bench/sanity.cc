#include "bench/kernel_bench/sanity.h"

#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/mla_verify/launch.h"
#include "tests/gpu/device_case.h"
#include "tests/reference/mla_reference.h"

namespace kjit::bench {
namespace {

Status RunCase(const kernels::KernelTable& kernels, const driver::DeviceInfo& dev, CUstream stream,
               const reference::CaseSpec& spec, const kernels::MlaVerifyPlanOptions& options) {
  const reference::MlaCase c = reference::MakeCase(spec);
  const kernels::MlaVerifyProblem& p = c.problem;
  KJIT_ASSIGN_OR_RETURN(kernels::MlaVerifyPlan plan, kernels::PlanMlaVerify(p, dev, options));
  KJIT_ASSIGN_OR_RETURN(std::unique_ptr<gputest::DeviceCase> d,
                        gputest::DeviceCase::Create(c, plan.workspace_bytes));  // outputs poisoned
  KJIT_RETURN_IF_ERROR(kernels::LaunchMlaVerify(kernels, plan, p, d->Buffers(p.write_lse), stream));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(stream), "sanity case"));
  std::vector<uint16_t> got;
  std::vector<float> got_lse;
  uint32_t err = 0;
  KJIT_RETURN_IF_ERROR(d->Download(&got, &got_lse, &err, plan.error_word_offset));
  const reference::RefOutput want = reference::Reference(c);
  const reference::Comparison cmp =
      reference::Compare(c, want, got, p.write_lse ? got_lse : std::vector<float>{},
                         plan.e4m3_mma() ? reference::E4m3MmaTolerance() : reference::Tolerance{});
  std::printf("sanity %s%s%s B%d splits=%d: %s\n", plan.specialization.c_str(),
              reference::UsesFp8Numerics(p) ? " (fp8 numerics)" : "", plan.e4m3_mma() ? " (e4m3 MMAs)" : "", p.batch, plan.num_splits,
              cmp.Describe().c_str());
  if (!cmp.ok()) return absl::InternalError(absl::StrCat("mla_verify disagrees with the reference: ", cmp.Describe()));
  if (err != 0) return absl::InternalError(absl::StrCat("mla_verify raised error bits ", err, " on a valid case"));
  return absl::OkStatus();
}

}  // namespace

Status CheckAgainstReference(const kernels::KernelTable& kernels, const driver::DeviceInfo& dev, CUstream stream,
                             int tile) {
  std::vector<reference::CaseSpec> specs(3);
  specs[0].seed = 11;
  specs[0].num_heads = 8;
  specs[0].prefix_lens = {1000, 37};
  specs[0].draft_lens = {16, 7};
  specs[0].tree = reference::TreeKind::kChain;
  specs[1].seed = 12;
  specs[1].num_heads = 8;
  specs[1].prefix_lens = {4097, 0, 129};
  specs[1].draft_lens = {33, 1, 64};
  specs[1].tree = reference::TreeKind::kRandom;
  specs[1].mask = kernels::MaskKind::kPacked;
  specs[1].padded_requests = 2;
  specs[2].seed = 13;
  specs[2].num_heads = 64;
  specs[2].prefix_lens = {700};
  specs[2].draft_lens = {5};
  specs[2].tree = reference::TreeKind::kBushy;
  specs[2].is_causal = false;
  specs[2].k_scale = 0.5f;
  specs[2].v_scale = 2.0f;
  // The same three with an fp8 e4m3 cache: dequant numerics, and SGLang Triton's fp8 numerics.
  for (int i = 0; i < 3; ++i) {
    reference::CaseSpec f = specs[i];
    f.seed += 100;
    f.kv_dtype = kernels::KvDtype::kFp8E4m3;
    f.fp8_numerics = i == 2 ? kernels::Fp8Numerics::kFp8 : kernels::Fp8Numerics::kDequant;
    specs.push_back(f);
  }
  for (const auto& s : specs) {
    if (s.kv_dtype == kernels::KvDtype::kFp8E4m3 && kernels::MlaVerifyTileFor(dev.cc_major, tile, s.kv_dtype).smem_bytes == 0) {
      std::printf("sanity: tile %d has no fp8 variant; fp8 cases not run\n", tile);
      continue;
    }
    // fp8 numerics on e4m3 MMAs where the device has them, and on the emulating kernel.
    const bool fp8_numerics = s.kv_dtype == kernels::KvDtype::kFp8E4m3 && s.fp8_numerics == kernels::Fp8Numerics::kFp8;
    for (bool fp8_mma : {true, false}) {
      KJIT_RETURN_IF_ERROR(RunCase(kernels, dev, stream, s, {.tile = tile, .fp8_mma = fp8_mma}));
      if (!fp8_numerics) break;
    }
  }
  return absl::OkStatus();
}

}  // namespace kjit::bench
