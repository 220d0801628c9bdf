// The KernelFamily of a family that serves the MLA verify schema (schema.h): mla_verify and its
// oracle mla_verify_naive differ only in the functions below, so one descriptor type holds both.
#pragma once

#include <cuda.h>

#include <string_view>
#include <vector>

#include "runtime/kernels/family.h"
#include "runtime/kernels/mla_verify/args.h"

namespace kjit::kernels {

struct MlaFamilyOps {
  std::string_view name;
  std::vector<Specialization> (*specializations)();
  // What the family's kernels accept beyond the schema (head counts, batch and size limits), checked
  // with the shapes, before any memory is looked up. max_draft and max_prefix are not set yet.
  Status (*check)(const MlaVerifyProblem& problem);
  StatusOr<MlaVerifyPlan> (*plan)(const MlaVerifyProblem& problem, const driver::DeviceInfo& device);
  Status (*launch)(const KernelTable& kernels, const MlaVerifyPlan& plan, const MlaVerifyProblem& problem,
                   const MlaVerifyBuffers& buffers, CUstream stream);
  // The kernels store the error word at MlaVerifyBuffers::error_word when it is given.
  bool stores_error_word = false;
};

// The error word's meaning for both families (their kernels set the same bits); num_slots < 0 when
// the bits may come from several launches.
Status MlaVerifyErrorStatus(uint32_t error_word, int64_t num_slots);

class MlaSchemaFamily final : public KernelFamily {
 public:
  explicit MlaSchemaFamily(MlaFamilyOps ops) : ops_(ops) {}
  std::string_view name() const override { return ops_.name; }
  std::span<const TensorSchema> inputs() const override;
  std::span<const TensorSchema> outputs() const override;
  std::span<const ParamSchema> params() const override;
  std::string_view optional_inputs_rule() const override;
  std::vector<Specialization> Specializations() const override { return ops_.specializations(); }
  std::vector<int64_t> OutputShape(size_t output, std::span<const TensorDesc> inputs) const override;
  StatusOr<std::unique_ptr<FamilyLaunch>> Check(std::span<const TensorDesc> inputs,
                                                std::span<const TensorDesc> outputs,
                                                const TypedParams& params) const override;
  Status ErrorStatus(uint32_t error_word) const override { return MlaVerifyErrorStatus(error_word, -1); }

 private:
  MlaFamilyOps ops_;
};

// The problem a launch of either family checked (and, after CheckIndexPointers or AssumeBounds,
// bounded); null for another family's launch.
const MlaVerifyProblem* MlaVerifyProblemOf(const FamilyLaunch& launch);



}  // namespace kjit::kernels
