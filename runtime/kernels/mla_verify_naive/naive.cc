#include "runtime/kernels/mla_verify_naive/naive.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernel_sources/mla_verify_naive/naive_params.h"
#include "runtime/kernels/mla_verify/launch.h"

namespace kjit::kernels {
namespace {

constexpr size_t kWorkspaceBytes = 256;  // the error word, padded to an allocation granule

static_assert(naive::kErrKvIndexOutOfRange == kMlaErrKvIndexOutOfRange);
static_assert(naive::kErrBadIndptr == kMlaErrBadIndptr);
static_assert(naive::kErrVExtendDiffers == kMlaErrVExtendDiffers);
static_assert(naive::kKDim == kMlaKDim && naive::kVDim == kMlaVDim);

}  // namespace

std::string_view MlaVerifyNaiveSpecialization(MaskKind mask) {
  return mask == MaskKind::kPacked ? "packed" : "bool";
}

std::string_view MlaVerifyNaiveNameExpression(MaskKind mask) {
  return mask == MaskKind::kPacked ? "kjit::naive::mla_verify_naive<true>"
                                   : "kjit::naive::mla_verify_naive<false>";
}

Status CheckMlaVerifyNaiveLimits(const MlaVerifyProblem& p) {
  if (p.num_heads < 1 || p.num_heads > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("mla_verify_naive: num_heads ", p.num_heads, " not in [1, 65535]"));
  }
  if (p.num_q < 0 || p.num_q > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("mla_verify_naive: num_q ", p.num_q, " not in [0, 2^31)"));
  }
  if (p.batch < 0 || p.num_slots < 0 || p.num_kv_indices < 0 || p.mask_len < 0) {
    return absl::InvalidArgumentError("mla_verify_naive: negative batch or buffer size");
  }
  if (p.mask_kind != MaskKind::kBool && p.mask_kind != MaskKind::kPacked) {
    return absl::InvalidArgumentError("mla_verify_naive: unknown mask kind");
  }
  return absl::OkStatus();
}

StatusOr<MlaVerifyPlan> PlanMlaVerifyNaive(const MlaVerifyProblem& p, const driver::DeviceInfo&) {
  KJIT_RETURN_IF_ERROR(CheckMlaVerifyNaiveLimits(p));
  MlaVerifyPlan plan;
  plan.family = std::string(kMlaVerifyNaiveFamily);
  plan.specialization = std::string(MlaVerifyNaiveSpecialization(p.mask_kind));
  plan.kv_dtype = p.kv_dtype;
  plan.num_splits = 1;
  plan.workspace_bytes = kWorkspaceBytes;
  plan.error_word_offset = 0;
  plan.main.grid[0] = static_cast<unsigned>(p.num_q);
  plan.main.grid[1] = static_cast<unsigned>(p.num_heads);
  plan.main.block[0] = naive::kThreads;
  plan.main.dynamic_smem = 0;
  plan.combine.grid[0] = 0;  // the oracle has no combine kernel
  return plan;
}

Status LaunchMlaVerifyNaive(const KernelTable& kernels, const MlaVerifyPlan& plan,
                            const MlaVerifyProblem& problem, const MlaVerifyBuffers& buffers, CUstream stream) {
  if (plan.family != kMlaVerifyNaiveFamily ||
      plan.specialization != MlaVerifyNaiveSpecialization(problem.mask_kind)) {
    return absl::InvalidArgumentError(absl::StrCat("mla_verify_naive: plan is for ", plan.family, "/",
                                                   plan.specialization, ", not this problem"));
  }
  if (plan.main.grid[0] != static_cast<uint64_t>(problem.num_q) ||
      plan.main.grid[1] != static_cast<unsigned>(problem.num_heads)) {
    return absl::InvalidArgumentError("mla_verify_naive: plan made for another problem size");
  }
  if (buffers.workspace == 0) return absl::InvalidArgumentError("mla_verify_naive: no workspace");
  if (buffers.error_word != 0) {
    return absl::InvalidArgumentError(
        "mla_verify_naive ORs its error word atomically in the workspace; leave buffers.error_word 0");
  }
  const bool any_rows = problem.num_q > 0;
  if (any_rows) {
    // Null or misaligned for the kernel's element accesses: refused here, since a misaligned access
    // would poison the GPU's context for every client (the fast family checks the same).
    const std::string_view f = kMlaVerifyNaiveFamily;
    const unsigned cache_align = problem.kv_dtype == KvDtype::kFp8E4m3 ? 1 : 2;
    KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.q, "q", 2));
    KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.k_extend, "k_extend", 2));
    if (problem.check_v_extend) KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.v_extend, "v_extend", 2));
    KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.qo_indptr, "qo_indptr", problem.qo_indptr_64 ? 8 : 4));
    KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.kv_indptr, "kv_indptr", problem.kv_indptr_64 ? 8 : 4));
    KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.o, "o", 2));
    if (problem.write_lse) KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.lse, "lse", 4));
    if (problem.num_kv_indices > 0) {
      KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.kv_indices, "kv_indices", 8));
      KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.kv_cache, "kv_cache", cache_align));
    }
    if (problem.mask_len > 0) {
      KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.mask, "mask", problem.mask_kind == MaskKind::kPacked ? 4 : 1));
    }
    if (problem.mask_kind == MaskKind::kBool) {
      KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.mask_indptr, "mask_indptr", 8));
    }
    if (buffers.accumulated_error_word != 0) {
      KJIT_RETURN_IF_ERROR(CheckLaunchPointer(f, buffers.accumulated_error_word, "accumulated_error_word", 4));
    }
  }
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  const CUdeviceptr error_word = buffers.workspace + plan.error_word_offset;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD32Async(error_word, 0, 1, stream),
                                     "mla_verify_naive: zero the error word"));
  if (!any_rows) return absl::OkStatus();

  KJIT_ASSIGN_OR_RETURN(CUfunction fn, kernels.Function(kMlaVerifyNaiveFamily, plan.specialization,
                                                        MlaVerifyNaiveNameExpression(problem.mask_kind)));
  naive::NaiveParams params{};
  params.q = reinterpret_cast<const unsigned short*>(buffers.q);
  params.k_extend = reinterpret_cast<const unsigned short*>(buffers.k_extend);
  params.kv_cache = reinterpret_cast<const unsigned short*>(buffers.kv_cache);
  params.kv_fp8 = problem.kv_dtype == KvDtype::kFp8E4m3 ? 1 : 0;
  params.fp8_round = params.kv_fp8 && problem.fp8_numerics == Fp8Numerics::kFp8 ? 1 : 0;
  params.v_extend = problem.check_v_extend ? reinterpret_cast<const unsigned short*>(buffers.v_extend) : nullptr;
  params.v_extend_stride_n = problem.v_extend_stride_n;
  params.qo_indptr = reinterpret_cast<const void*>(buffers.qo_indptr);
  params.kv_indptr = reinterpret_cast<const void*>(buffers.kv_indptr);
  params.qo_indptr_64 = problem.qo_indptr_64 ? 1 : 0;
  params.kv_indptr_64 = problem.kv_indptr_64 ? 1 : 0;
  params.kv_indices = reinterpret_cast<const long long*>(buffers.kv_indices);
  params.mask = reinterpret_cast<const void*>(buffers.mask);
  params.mask_indptr = reinterpret_cast<const long long*>(buffers.mask_indptr);
  params.o = reinterpret_cast<unsigned short*>(buffers.o);
  params.lse = problem.write_lse ? reinterpret_cast<float*>(buffers.lse) : nullptr;
  params.error_word = reinterpret_cast<unsigned*>(error_word);
  params.accumulated_error_word = reinterpret_cast<unsigned*>(buffers.accumulated_error_word);
  params.num_q = problem.num_q;
  params.num_slots = problem.num_slots;
  params.num_kv_indices = problem.num_kv_indices;
  params.mask_len = problem.mask_len;
  params.q_stride_n = problem.q_stride_n;
  params.q_stride_h = problem.q_stride_h;
  params.k_extend_stride_n = problem.k_extend_stride_n;
  params.o_stride_n = problem.o_stride_n;
  params.o_stride_h = problem.o_stride_h;
  params.batch = problem.batch;
  params.num_heads = problem.num_heads;
  params.is_causal = problem.is_causal ? 1 : 0;
  constexpr double kLog2e = 1.4426950408889634;
  params.prefix_scale_log2 = static_cast<float>(static_cast<double>(problem.sm_scale) * problem.k_scale * kLog2e);
  params.tree_scale_log2 = static_cast<float>(static_cast<double>(problem.sm_scale) * kLog2e);
  params.v_scale = problem.v_scale;

  void* args[] = {&params};
  const KernelGeometry& g = plan.main;
  return driver::Check(api->cuLaunchKernel(fn, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1],
                                           g.block[2], g.dynamic_smem, stream, args, nullptr),
                       "mla_verify_naive: cuLaunchKernel");
}

}  // namespace kjit::kernels
