// The tensor schema of the mla_verify and mla_verify_naive families (PROTOCOL.md "Models") and its
// validation: plain descriptions of the request's tensors in, an MlaVerifyProblem out. Every error
// is INVALID_ARGUMENT and names the tensor. mla_family.h builds both families' descriptors on it.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/kernels/family.h"
#include "runtime/kernels/mla_verify/args.h"

namespace kjit::kernels {

// Scalars from request parameters; unset ones take the defaults (sm_scale has none).
struct MlaVerifyScalars {
  std::optional<double> sm_scale;
  std::optional<double> k_scale;   // default 1
  std::optional<double> v_scale;   // default 1
  std::optional<bool> is_causal;   // default true
  std::optional<std::string> kv_dtype;      // kjit_kv_dtype: "bf16" (default) or "fp8_e4m3"
  std::optional<std::string> fp8_numerics;  // kjit_fp8_numerics: "dequant" (default) or "fp8"
};

// Schema positions: indices into MlaVerifyInputSchema() and MlaVerifyLayout::input_slot.
enum MlaVerifyInput : int {
  kInQ, kInKExtend, kInKvCache, kInQoIndptr, kInKvIndptr, kInKvIndices, kInCustomMask, kInPackedMask,
  kInMaskIndptr, kInVExtend, kNumMlaVerifyInputs
};
enum MlaVerifyOutput : int { kOutO, kOutLse, kNumMlaVerifyOutputs };
// Parameter positions in MlaVerifyParamSchema().
enum MlaVerifyParam : int {
  kParamSmScale, kParamKScale, kParamVScale, kParamIsCausal, kParamMaxDraft, kParamMaxPrefix, kParamKvDtype,
  kParamFp8Numerics, kNumMlaVerifyParams
};

// The schema ModelMetadata and ModelConfig show and the checks below enforce.
std::span<const TensorSchema> MlaVerifyInputSchema();
std::span<const TensorSchema> MlaVerifyOutputSchema();
std::span<const ParamSchema> MlaVerifyParamSchema();

// The scalars, and kjit_max_draft / kjit_max_prefix (0 / -1: not given), from converted parameters.
struct MlaVerifyHints {
  int64_t max_draft = 0;
  int64_t max_prefix = -1;
};
MlaVerifyScalars MlaVerifyScalarsOf(const TypedParams& params);
MlaVerifyHints MlaVerifyHintsOf(const TypedParams& params);

// Which inputs a validated request carries, by schema position.
struct MlaVerifyLayout {
  int input_slot[kNumMlaVerifyInputs] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};  // -> request input index
  int o_output = -1;                                         // request output index of "o"
  int lse_output = -1;                                       // -1: not requested
};

// Phase 1, from names, datatypes, shapes and byte sizes alone: fills every MlaVerifyProblem field
// except max_draft / max_prefix (set by phase 2). On success, `layout` says where each tensor is.
StatusOr<MlaVerifyProblem> CheckMlaVerifyShapes(std::span<const TensorDesc> inputs,
                                                std::span<const TensorDesc> outputs,
                                                const MlaVerifyScalars& scalars,
                                                MlaVerifyLayout* layout);

// Phase 2, with host copies of the index pointers: qo_indptr and kv_indptr start at 0, are
// monotone, end at N and within kv_indices; every D_b is in [1, 64]; mask_indptr (custom_mask
// only; empty span for packed) matches cumsum(D_b * (P_b + D_b)) from its first entry and stays
// inside the mask; a packed mask holds sum D_b * ceil(D_b / 32) words. Sets max_draft, max_prefix.
Status CheckMlaVerifyIndptrs(std::span<const int64_t> qo_indptr, std::span<const int64_t> kv_indptr,
                             std::span<const int64_t> mask_indptr, MlaVerifyProblem* problem);
// The same for int32 index pointers (widened).
Status CheckMlaVerifyIndptrs(std::span<const int32_t> qo_indptr, std::span<const int32_t> kv_indptr,
                             std::span<const int64_t> mask_indptr, MlaVerifyProblem* problem);

}  // namespace kjit::kernels
