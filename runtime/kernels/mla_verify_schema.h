// The tensor schema of the mla_verify and mla_verify_naive models (PROTOCOL.md "Models") and its
// validation: plain descriptions of the request's tensors in, an MlaVerifyProblem out. Transport
// agnostic (the daemon fills these from protobuf; the launch ring from its descriptors). Every
// error is INVALID_ARGUMENT and names the tensor.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/kernels/mla_verify_args.h"

namespace kjit::kernels {

// Datatype names of the inference protocol and their element sizes (0 for BYTES and unknowns).
size_t DatatypeSize(std::string_view datatype);

// One tensor of a request as the transport describes it. byte_size is the exact number of bytes
// supplied (inputs) or the capacity (outputs).
struct TensorDesc {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  uint64_t byte_size = 0;
};

// Scalars from request parameters; unset ones take the defaults (sm_scale has none).
struct MlaVerifyScalars {
  std::optional<double> sm_scale;
  std::optional<double> k_scale;   // default 1
  std::optional<double> v_scale;   // default 1
  std::optional<bool> is_causal;   // default true
};

// Input names in the schema order; outputs "o" and optional "lse".
inline constexpr const char* kMlaVerifyInputs[] = {"q",          "k_extend",    "kv_cache",
                                                   "qo_indptr",  "kv_indptr",   "kv_indices",
                                                   "custom_mask", "packed_mask", "mask_indptr"};

// Schema positions: indices into kMlaVerifyInputs and MlaVerifyLayout::input_slot.
enum MlaVerifyInput : int {
  kInQ, kInKExtend, kInKvCache, kInQoIndptr, kInKvIndptr, kInKvIndices, kInCustomMask, kInPackedMask,
  kInMaskIndptr, kNumMlaVerifyInputs
};
static_assert(std::size(kMlaVerifyInputs) == kNumMlaVerifyInputs, "one name per schema position");

// Which inputs a validated request carries, by schema position.
struct MlaVerifyLayout {
  int input_slot[kNumMlaVerifyInputs] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};  // -> request input index
  int o_output = -1;                                         // request output index of "o"
  int lse_output = -1;                                       // -1: not requested
};

// Phase 1, from names, datatypes, shapes and byte sizes alone: fills every MlaVerifyProblem field
// except max_draft / max_prefix (set by phase 2). On success, `layout` says where each tensor is.
StatusOr<MlaVerifyProblem> CheckMlaVerifyShapes(const std::vector<TensorDesc>& inputs,
                                                const std::vector<TensorDesc>& outputs,
                                                const MlaVerifyScalars& scalars,
                                                MlaVerifyLayout* layout);

// Phase 2, with host copies of the index pointers: qo_indptr and kv_indptr start at 0, are
// monotone, end at N and within kv_indices; every D_b is in [1, 64]; mask_indptr (custom_mask
// only; empty span for packed) matches cumsum(D_b * (P_b + D_b)) from its first entry and stays
// inside the mask; a packed mask holds sum D_b * ceil(D_b / 32) words. Sets max_draft, max_prefix.
Status CheckMlaVerifyIndptrs(std::span<const int32_t> qo_indptr, std::span<const int32_t> kv_indptr,
                             std::span<const int64_t> mask_indptr, MlaVerifyProblem* problem);

}  // namespace kjit::kernels
