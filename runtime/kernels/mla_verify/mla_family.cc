#include "runtime/kernels/mla_verify/mla_family.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/mla_verify/schema.h"

namespace kjit::kernels {
namespace {

// Host copies may sit at any alignment (a region offset, an inline slot).
template <typename T>
std::vector<T> Words(std::span<const uint8_t> bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// An index pointer of int32 or int64 entries, widened.
std::vector<int64_t> Indptr(std::span<const uint8_t> bytes, bool is_64) {
  if (is_64) return Words<int64_t>(bytes);
  const std::vector<int32_t> narrow = Words<int32_t>(bytes);
  return std::vector<int64_t>(narrow.begin(), narrow.end());
}

class MlaLaunch final : public FamilyLaunch {
 public:
  MlaLaunch(const MlaFamilyOps* ops, MlaVerifyProblem problem, MlaVerifyLayout layout, MlaVerifyHints hints)
      : ops_(ops), problem_(problem), layout_(layout), hints_(hints) {
    outputs_[kOutO] = layout_.o_output;
    outputs_[kOutLse] = layout_.lse_output;
  }

  std::span<const int> input_slots() const override { return layout_.input_slot; }
  std::span<const int> output_slots() const override { return outputs_; }
  bool has_bounds() const override { return hints_.max_draft > 0; }

  Status CheckIndexPointers(std::span<const std::span<const uint8_t>> by_input) override {
    if (by_input.size() != kNumMlaVerifyInputs) return absl::InternalError("index pointers by schema position");
    const auto qo = Indptr(by_input[kInQoIndptr], problem_.qo_indptr_64);
    const auto kv = Indptr(by_input[kInKvIndptr], problem_.kv_indptr_64);
    const auto mask = Words<int64_t>(by_input[kInMaskIndptr]);
    return CheckMlaVerifyIndptrs(std::span<const int64_t>(qo), std::span<const int64_t>(kv), mask, &problem_);
  }

  // No request has more draft tokens than q has rows, or a longer prefix than kv_indices has
  // entries: hints past those are clamped (they size the workspace and the plan's arithmetic).
  void AssumeBounds() override {
    const int64_t by_q = std::clamp<int64_t>(problem_.num_q, 1, kMlaMaxDraft);
    problem_.max_draft = static_cast<int>(hints_.max_draft > 0 ? std::min(hints_.max_draft, by_q) : by_q);
    problem_.max_prefix =
        hints_.max_prefix >= 0 ? std::min(hints_.max_prefix, problem_.num_kv_indices) : problem_.num_kv_indices;
  }

  StatusOr<LaunchNeeds> Plan(const driver::DeviceInfo& device) override {
    KJIT_ASSIGN_OR_RETURN(plan_, ops_->plan(problem_, device));
    LaunchNeeds needs;
    needs.workspace_bytes = std::max(plan_.workspace_bytes, plan_.error_word_offset + sizeof(uint32_t));
    needs.error_word_offset = plan_.error_word_offset;
    // With no query rows the launch only zeroes the error word, a memset in the workspace.
    needs.stores_error_word = ops_->stores_error_word && problem_.num_q > 0;
    return needs;
  }

  Status Enqueue(const KernelTable& kernels, const LaunchAddresses& a, CUstream stream) const override {
    if (a.inputs.size() != kNumMlaVerifyInputs || a.outputs.size() != kNumMlaVerifyOutputs)
      return absl::InternalError("launch addresses by schema position");
    MlaVerifyBuffers b;
    b.q = a.inputs[kInQ];
    b.k_extend = a.inputs[kInKExtend];
    b.kv_cache = a.inputs[kInKvCache];
    b.v_extend = a.inputs[kInVExtend];
    b.qo_indptr = a.inputs[kInQoIndptr];
    b.kv_indptr = a.inputs[kInKvIndptr];
    b.kv_indices = a.inputs[kInKvIndices];
    b.mask = a.inputs[problem_.mask_kind == MaskKind::kBool ? kInCustomMask : kInPackedMask];
    b.mask_indptr = a.inputs[kInMaskIndptr];
    b.o = a.outputs[kOutO];
    b.lse = a.outputs[kOutLse];
    b.workspace = a.workspace;
    b.error_word = ops_->stores_error_word ? a.error_word : 0;
    b.accumulated_error_word = a.accumulated_error_word;
    return ops_->launch(kernels, plan_, problem_, b, stream);
  }

  Status ErrorStatus(uint32_t error_word) const override {
    return MlaVerifyErrorStatus(error_word, problem_.num_slots);
  }

  const MlaVerifyProblem& problem() const { return problem_; }

 private:
  const MlaFamilyOps* ops_;
  MlaVerifyProblem problem_;
  MlaVerifyLayout layout_;
  MlaVerifyHints hints_;
  int outputs_[kNumMlaVerifyOutputs];
  MlaVerifyPlan plan_;
};

}  // namespace

const MlaVerifyProblem* MlaVerifyProblemOf(const FamilyLaunch& launch) {
  const auto* mla = dynamic_cast<const MlaLaunch*>(&launch);
  return mla != nullptr ? &mla->problem() : nullptr;
}

Status MlaVerifyErrorStatus(uint32_t err, int64_t num_slots) {
  if (err & kMlaErrVExtendDiffers) {
    return absl::InvalidArgumentError(
        "tensor 'v_extend': it differs from k_extend[..., :512], which the kernels read as V of the draft "
        "tokens; the output is not what v_extend asks for");
  }
  if (err & kMlaErrKvIndexOutOfRange) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor 'kv_indices': kv_indices entry >= S",
        num_slots >= 0 ? absl::StrCat(" (", num_slots, " kv_cache rows)") : std::string(),
        "; those slots were treated as masked and the output is not valid"));
  }
  if (err != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the kernel reported error bits 0x", absl::Hex(err),
        ": an index pointer (qo_indptr, kv_indptr or mask_indptr) leaves its tensors or gives a request "
        "more than max_draft (kjit_max_draft) draft tokens; those requests were skipped and the output "
        "is not valid"));
  }
  return absl::OkStatus();
}

std::span<const TensorSchema> MlaSchemaFamily::inputs() const { return MlaVerifyInputSchema(); }
std::span<const TensorSchema> MlaSchemaFamily::outputs() const { return MlaVerifyOutputSchema(); }
std::span<const ParamSchema> MlaSchemaFamily::params() const { return MlaVerifyParamSchema(); }

std::string_view MlaSchemaFamily::optional_inputs_rule() const {
  return "custom_mask|packed_mask (exactly one), mask_indptr (with custom_mask)";
}

std::vector<int64_t> MlaSchemaFamily::OutputShape(size_t output, std::span<const TensorDesc> inputs) const {
  std::vector<int64_t> nh = {0, 0};
  for (const TensorDesc& t : inputs) {
    if (t.name == "q" && t.shape.size() == 3 && t.shape[0] >= 0 && t.shape[1] >= 0) nh = {t.shape[0], t.shape[1]};
  }
  if (output == kOutO) nh.push_back(kMlaVDim);
  return nh;
}

StatusOr<std::unique_ptr<FamilyLaunch>> MlaSchemaFamily::Check(std::span<const TensorDesc> inputs,
                                                               std::span<const TensorDesc> outputs,
                                                               const TypedParams& params) const {
  if (params.size() != kNumMlaVerifyParams) return absl::InternalError("parameters converted by another schema");
  MlaVerifyLayout layout;
  KJIT_ASSIGN_OR_RETURN(MlaVerifyProblem problem,
                        CheckMlaVerifyShapes(inputs, outputs, MlaVerifyScalarsOf(params), &layout));
  KJIT_RETURN_IF_ERROR(ops_.check(problem));
  return std::make_unique<MlaLaunch>(&ops_, problem, layout, MlaVerifyHintsOf(params));
}

}  // namespace kjit::kernels
