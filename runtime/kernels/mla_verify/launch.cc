#include "runtime/kernels/mla_verify/launch.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernel_sources/mla_verify/params.h"
#include "kernel_sources/mla_verify/traits.h"
#include "runtime/driver/cuda_driver.h"

namespace kjit::kernels {
namespace {

static_assert(mla::kErrKvIndexOutOfRange == kMlaErrKvIndexOutOfRange, "error bits agree");
static_assert(mla::kErrBadIndptr == kMlaErrBadIndptr, "error bits agree");
static_assert(mla::kErrVExtendDiffers == kMlaErrVExtendDiffers, "error bits agree");

Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("mla_verify launch: ", what));
}

Status CheckPtr(CUdeviceptr ptr, const char* name, unsigned align) {
  return CheckLaunchPointer(kMlaVerifyFamily, ptr, name, align);
}

template <typename T>
T* As(CUdeviceptr p) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(p));
}

Status Launch(const driver::Api& api, CUfunction f, const KernelGeometry& g, CUstream stream,
              mla::MlaVerifyParams* params, const char* what) {
  void* args[] = {params};
  if (!g.programmatic_dependent) {
    return driver::Check(api.cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1],
                                            g.block[2], g.dynamic_smem, stream, args, nullptr),
                         what);
  }
  // Programmatic dependent launch: the kernel's launch overlaps the previous kernel's tail; the
  // kernel itself waits for that grid (griddepcontrol.wait) before reading its results. Captured
  // into a CUDA graph as a programmatic edge.
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = g.grid[0], cfg.gridDimY = g.grid[1], cfg.gridDimZ = g.grid[2];
  cfg.blockDimX = g.block[0], cfg.blockDimY = g.block[1], cfg.blockDimZ = g.block[2];
  cfg.sharedMemBytes = g.dynamic_smem;
  cfg.hStream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return driver::Check(api.cuLaunchKernelEx(&cfg, f, args, nullptr), what);
}

// The kernels' parameters for a launch that LaunchMlaVerify has checked.
mla::MlaVerifyParams MakeParams(const MlaVerifyPlan& plan, const MlaVerifyProblem& p, const MlaVerifyBuffers& b,
                                const MlaVerifyWorkspaceLayout& ws, CUdeviceptr error_word, size_t split_ctas,
                                unsigned rows_cap) {
  mla::MlaVerifyParams params{};
  params.q = As<const unsigned short>(b.q);
  params.k_extend = As<const unsigned short>(b.k_extend);
  params.kv_cache = As<const unsigned short>(b.kv_cache);
  params.v_extend = p.check_v_extend ? As<const unsigned short>(b.v_extend) : nullptr;
  params.v_extend_stride_n = p.v_extend_stride_n;
  params.qo_indptr = As<const void>(b.qo_indptr);
  params.kv_indptr = As<const void>(b.kv_indptr);
  params.qo_indptr_64 = p.qo_indptr_64 ? 1 : 0;
  params.kv_indptr_64 = p.kv_indptr_64 ? 1 : 0;
  params.kv_indices = As<const long long>(b.kv_indices);
  params.mask = As<const void>(b.mask);
  params.mask_indptr = As<const long long>(b.mask_indptr);
  params.o = As<unsigned short>(b.o);
  params.lse = p.write_lse ? As<float>(b.lse) : nullptr;
  params.part_o = As<unsigned short>(b.workspace + ws.part_o_offset);
  params.part_lse = As<float>(b.workspace + ws.part_lse_offset);
  params.error_word = As<unsigned>(error_word);
  params.accumulated_error_word = b.accumulated_error_word != 0 ? As<unsigned>(b.accumulated_error_word) : nullptr;
  params.error_slots = As<unsigned>(b.workspace + ws.error_slots_offset);
  params.error_slot_count = static_cast<int>(split_ctas);
  params.combine_row_parts = plan.combine_row_parts;
  params.num_q = p.num_q;
  params.num_slots = p.num_slots;
  params.num_kv_indices = p.num_kv_indices;
  params.mask_len = p.mask_len;
  params.q_stride_n = p.q_stride_n;
  params.q_stride_h = p.q_stride_h;
  params.k_extend_stride_n = p.k_extend_stride_n;
  params.o_stride_n = p.o_stride_n;
  params.o_stride_h = p.o_stride_h;
  params.batch = p.batch;
  params.max_draft = p.max_draft;
  params.num_splits = plan.num_splits;
  params.rows_cap = static_cast<int>(rows_cap);
  const bool fp8_round = p.kv_dtype == KvDtype::kFp8E4m3 && p.fp8_numerics == Fp8Numerics::kFp8;
  params.flags = (p.is_causal ? mla::kCausalBit : 0) | (fp8_round ? mla::kFp8RoundBit : 0) |
                 (plan.half_tiles ? mla::kHalfTileBit : 0);
  const MlaVerifyScoreScales scales = ScoreScalesLog2(p);
  params.prefix_scale_log2 = scales.prefix_log2;
  params.tree_scale_log2 = scales.tree_log2;
  params.v_scale = p.v_scale;
  return params;
}

}  // namespace

Status CheckLaunchPointer(std::string_view family, CUdeviceptr ptr, const char* name, unsigned align) {
  const absl::string_view f(family.data(), family.size());
  if (ptr == 0) return absl::InvalidArgumentError(absl::StrCat(f, " launch: ", name, " is null"));
  if (ptr % align != 0) {
    return absl::InvalidArgumentError(absl::StrCat(f, " launch: ", name, " must be ", align, "-byte aligned"));
  }
  return absl::OkStatus();
}

Status LaunchMlaVerify(const KernelTable& kernels, const MlaVerifyPlan& plan, const MlaVerifyProblem& p,
                       const MlaVerifyBuffers& b, CUstream stream) {
  if (plan.family != kMlaVerifyFamily)
    return Invalid(absl::StrCat("plan is for family '", plan.family, "'"));
  if (plan.tile < 0 || plan.tile >= mla::kNumTileIds || plan.num_heads != p.num_heads ||
      plan.mask_kind != p.mask_kind || plan.kv_dtype != p.kv_dtype)
    return Invalid(absl::StrCat("plan specialization '", plan.specialization, "' does not match H = ",
                                p.num_heads, ", the mask kind and the cache's element type"));
  KJIT_ASSIGN_OR_RETURN(const MlaVerifyWorkspaceLayout ws, MlaVerifyWorkspace(p, plan.num_splits));
  if (ws.bytes != plan.workspace_bytes)
    return Invalid("plan was made for another problem (workspace size differs); re-plan");
  if (p.kv_dtype == KvDtype::kFp8E4m3 && plan.fp8_numerics != p.fp8_numerics)
    return Invalid("plan was made for the other fp8 numerics; re-plan");
  const unsigned rows_cap = static_cast<unsigned>(p.max_draft * p.num_heads);
  // With a tree launch of its own the main kernel's slabs are the prefix chunks only.
  const bool tree_launch = !plan.tree_kernel.empty();
  if (tree_launch && (plan.tree.grid[0] != plan.main.grid[0] || plan.tree.grid[1] != plan.main.grid[1] ||
                      plan.tree.grid[2] != 1 || plan.tree.block[0] != plan.main.block[0]))
    return Invalid("plan geometry does not match the problem; re-plan");
  if (plan.main.grid[1] != static_cast<unsigned>(p.batch) ||
      plan.main.grid[2] != static_cast<unsigned>(plan.num_splits) + (tree_launch ? 0 : 1) ||
      plan.main.grid[0] * plan.main.block[0] == 0 ||
      (plan.half_tiles && plan.main.grid[0] != (rows_cap + mla::TileWgmma64x64::kHalfRows - 1) /
                                                   mla::TileWgmma64x64::kHalfRows) ||
      plan.combine_row_parts == 0 || mla::CombinePartsOf(plan.combine_row_parts) > mla::kCombineMaxRowParts ||
      plan.combine.grid[0] != mla::CombineCtasPerRequest(rows_cap, plan.combine_row_parts, plan.num_splits + 1))
    return Invalid("plan geometry does not match the problem; re-plan");
  KJIT_RETURN_IF_ERROR(CheckPtr(b.workspace, "workspace", 256));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());

  const size_t split_ctas =
      static_cast<size_t>(plan.main.grid[0]) * plan.main.grid[1] * (static_cast<size_t>(plan.num_splits) + 1);
  if (split_ctas > ws.error_slots) return Invalid("plan geometry does not match the problem; re-plan");
  if (split_ctas > static_cast<size_t>(std::numeric_limits<int>::max()))
    return Invalid(absl::StrCat("the split kernel's grid has ", split_ctas, " CTAs; use fewer requests per launch"));
  // The combine writes the error word from the split CTAs' slots on every launch (so a graph replay
  // reports its own errors); with no rows no kernel runs, and the word is zeroed in-stream instead.
  const CUdeviceptr error_word = b.error_word != 0 ? b.error_word : b.workspace + plan.error_word_offset;
  if (b.error_word != 0) KJIT_RETURN_IF_ERROR(CheckPtr(b.error_word, "error_word", 4));
  if (p.num_q == 0) {
    return driver::Check(api->cuMemsetD32Async(error_word, 0, 1, stream), "mla_verify: zero the error word");
  }

  KJIT_RETURN_IF_ERROR(CheckPtr(b.q, "q", 16));
  KJIT_RETURN_IF_ERROR(CheckPtr(b.k_extend, "k_extend", 16));
  KJIT_RETURN_IF_ERROR(CheckPtr(b.kv_cache, "kv_cache", 16));
  if (p.check_v_extend) KJIT_RETURN_IF_ERROR(CheckPtr(b.v_extend, "v_extend", 16));
  KJIT_RETURN_IF_ERROR(CheckPtr(b.qo_indptr, "qo_indptr", p.qo_indptr_64 ? 8 : 4));
  KJIT_RETURN_IF_ERROR(CheckPtr(b.kv_indptr, "kv_indptr", p.kv_indptr_64 ? 8 : 4));
  if (b.accumulated_error_word != 0) KJIT_RETURN_IF_ERROR(CheckPtr(b.accumulated_error_word, "accumulated_error_word", 4));
  KJIT_RETURN_IF_ERROR(CheckPtr(b.o, "o", 8));
  if (p.num_kv_indices > 0) KJIT_RETURN_IF_ERROR(CheckPtr(b.kv_indices, "kv_indices", 8));
  if (p.mask_len > 0) {
    KJIT_RETURN_IF_ERROR(CheckPtr(b.mask, "mask", p.mask_kind == MaskKind::kPacked ? 4 : 1));
  }
  if (p.mask_kind == MaskKind::kBool) KJIT_RETURN_IF_ERROR(CheckPtr(b.mask_indptr, "mask_indptr", 8));
  if (p.write_lse) KJIT_RETURN_IF_ERROR(CheckPtr(b.lse, "lse", 4));

  KJIT_ASSIGN_OR_RETURN(CUfunction split, kernels.Function(kMlaVerifyFamily, plan.specialization, plan.main_kernel));
  KJIT_ASSIGN_OR_RETURN(CUfunction combine, kernels.Function(kMlaVerifyFamily, plan.specialization, plan.combine_kernel));
  CUfunction tree = nullptr;
  if (tree_launch) {
    KJIT_ASSIGN_OR_RETURN(tree, kernels.Function(kMlaVerifyFamily, plan.specialization, plan.tree_kernel));
  }

  mla::MlaVerifyParams params = MakeParams(plan, p, b, ws, error_word, split_ctas, rows_cap);

  KJIT_RETURN_IF_ERROR(Launch(*api, split, plan.main, stream, &params, "mla_verify: launch split kernel"));
  if (tree_launch) {
    // Its one slab is split 0 (the last slab of the one-launch grid), and so are its error slots.
    mla::MlaVerifyParams tree_params = params;
    tree_params.error_slots += static_cast<size_t>(plan.main.grid[0]) * plan.main.grid[1] * plan.num_splits;
    tree_params.flags |= mla::kTreeLaunchBit;
    KJIT_RETURN_IF_ERROR(Launch(*api, tree, plan.tree, stream, &tree_params, "mla_verify: launch tree kernel"));
  }
  return Launch(*api, combine, plan.combine, stream, &params, "mla_verify: launch combine");
}

}  // namespace kjit::kernels
