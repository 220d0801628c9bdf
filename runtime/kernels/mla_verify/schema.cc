#include "runtime/kernels/mla_verify/schema.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_join.h"
#include "runtime/common/client_text.h"

namespace kjit::kernels {
namespace {

Status Bad(const std::string& tensor, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor, "': ", what));
}

// Checks the datatype and rank the schema gives, non-negative dims, and bytes == elements * size
// exactly (inputs) or bytes >= that (outputs, a capacity), with overflow checks.
Status CheckTensor(const TensorDesc& t, const TensorSchema& schema, bool exact) {
  bool type_ok = false;
  for (const std::string& ty : schema.datatypes) type_ok |= (t.datatype == ty);
  if (!type_ok) {
    return Bad(t.name, absl::StrCat("datatype ", ClientText(t.datatype), " not accepted (want ",
                                    absl::StrJoin(schema.datatypes, " or "), ")"));
  }
  const size_t rank = schema.shape.size();
  if (t.shape.size() != rank) {
    return Bad(t.name, absl::StrCat("shape ", ShapeText(t.shape), " must have rank ", rank));
  }
  const std::optional<uint64_t> count = ShapeElements(t.shape);
  if (!count) {
    const bool negative = std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; });
    return Bad(t.name, negative ? absl::StrCat("negative dimension in ", ShapeText(t.shape))
                                : absl::StrCat("shape ", ShapeText(t.shape), " overflows"));
  }
  const uint64_t elems = *count;
  const uint64_t elem_size = DatatypeSize(t.datatype);
  if (elems > std::numeric_limits<uint64_t>::max() / elem_size) {
    return Bad(t.name, absl::StrCat("shape ", ShapeText(t.shape), " overflows"));
  }
  uint64_t need = elems * elem_size;
  if (!t.strides.empty()) {  // a view: its bytes span from the first element to the last
    if (t.strides.size() != rank) return Bad(t.name, absl::StrCat("has ", t.strides.size(), " strides for rank ", rank));
    uint64_t last = 0;  // offset of the last element, in elements
    for (size_t i = 0; i < rank && elems > 0; ++i) {
      if (t.strides[i] < 0) return Bad(t.name, "negative strides are not supported");
      const uint64_t step = static_cast<uint64_t>(t.strides[i]), extent = static_cast<uint64_t>(t.shape[i] - 1);
      if (step != 0 && extent > (std::numeric_limits<uint64_t>::max() / 2 - last) / step) {
        return Bad(t.name, "strides overflow");
      }
      last += extent * step;
    }
    if (elems > 0 && last + 1 > std::numeric_limits<uint64_t>::max() / elem_size) return Bad(t.name, "strides overflow");
    need = elems == 0 ? 0 : (last + 1) * elem_size;
    exact = false;  // the span is what must be there; the caller's buffer may be larger
  }
  if (exact ? t.byte_size != need : t.byte_size < need) {
    return Bad(t.name, absl::StrCat(t.byte_size, " bytes given, ", ShapeText(t.shape), " ",
                                    t.datatype, " needs ", exact ? "exactly " : "at least ", need));
  }
  return absl::OkStatus();
}

// The element stride of dimension i: the given one, or row-major's.
int64_t StrideOf(const TensorDesc& t, size_t i) {
  if (!t.strides.empty()) return t.strides[i];
  int64_t s = 1;
  for (size_t j = i + 1; j < t.shape.size(); ++j) s *= t.shape[j];
  return s;
}

// Dimension i steps by `want` elements (or has at most one index, so its stride means nothing).
Status StrideIs(const TensorDesc& t, size_t i, int64_t want, const char* what) {
  if (t.shape[i] <= 1 || StrideOf(t, i) == want) return absl::OkStatus();
  return Bad(t.name, absl::StrCat("stride of dimension ", i, " is ", StrideOf(t, i), ", expected ", want, " (", what, ")"));
}

Status Dim(const TensorDesc& t, size_t i, int64_t want, const char* what) {
  if (t.shape[i] != want) {
    return Bad(t.name, absl::StrCat("dimension ", i, " is ", t.shape[i], ", expected ", want, " (",
                                    what, ")"));
  }
  return absl::OkStatus();
}

// kv_cache's element type from its datatype and kjit_kv_dtype, which must agree; then the numerics.
Status KvType(const TensorDesc& kv, const MlaVerifyScalars& s, MlaVerifyProblem* p) {
  const std::string dtype = s.kv_dtype.value_or("bf16");
  if (dtype == "bf16") {
    if (kv.datatype != "BF16") {
      return Bad("kv_cache", absl::StrCat("datatype ", kv.datatype,
                                          " carries an fp8 cache: set parameter 'kjit_kv_dtype' to \"fp8_e4m3\""));
    }
    p->kv_dtype = KvDtype::kBf16;
  } else if (dtype == "fp8_e4m3") {
    if (kv.datatype != "UINT8") {
      return Bad("kv_cache", absl::StrCat("datatype ", kv.datatype,
                                          " with kjit_kv_dtype \"fp8_e4m3\": an fp8 cache travels as UINT8"));
    }
    p->kv_dtype = KvDtype::kFp8E4m3;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("parameter 'kjit_kv_dtype' is \"", ClientText(dtype),
                                                   "\"; use \"bf16\" or \"fp8_e4m3\""));
  }
  if (!s.fp8_numerics.has_value()) return absl::OkStatus();
  const std::string& n = *s.fp8_numerics;
  if (n != "dequant" && n != "fp8") {
    return absl::InvalidArgumentError(absl::StrCat("parameter 'kjit_fp8_numerics' is \"", ClientText(n),
                                                   "\"; use \"dequant\" or \"fp8\""));
  }
  if (p->kv_dtype != KvDtype::kFp8E4m3) {
    return absl::InvalidArgumentError(
        "parameter 'kjit_fp8_numerics' applies to an fp8 cache only (kjit_kv_dtype \"fp8_e4m3\")");
  }
  p->fp8_numerics = n == "fp8" ? Fp8Numerics::kFp8 : Fp8Numerics::kDequant;
  return absl::OkStatus();
}

// A scale is a positive normal float: the kernels take it in fp32, where a value below FLT_MIN would
// be 0 or a denormal (flushed to 0), and every score or value it multiplies with it.
bool NormalFloat(double x) {
  return std::isfinite(x) && x >= std::numeric_limits<float>::min() && x <= std::numeric_limits<float>::max();
}

Status Scale(const char* name, std::optional<double> v, double dflt, float* out) {
  const double x = v.value_or(dflt);
  if (!NormalFloat(x)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be a positive finite float of at ",
                                                   "least ", std::numeric_limits<float>::min(), ", got ", x));
  }
  *out = static_cast<float>(x);
  return absl::OkStatus();
}

// The kernels' score scales (ScoreScalesLog2, fp32 as launched): each scale may be a normal float
// while a product is not.
Status ScaleProducts(const MlaVerifyProblem& p) {
  const MlaVerifyScoreScales s = ScoreScalesLog2(p);
  if (!NormalFloat(s.prefix_log2) || !NormalFloat(s.tree_log2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters 'sm_scale' (", p.sm_scale, ") and 'k_scale' (", p.k_scale,
        "): the kernels' score scales sm_scale * k_scale * log2(e) and sm_scale * log2(e) must be normal fp32 floats"));
  }
  return absl::OkStatus();
}

}  // namespace

std::span<const TensorSchema> MlaVerifyInputSchema() {
  static const TensorSchema* const schema = new TensorSchema[kNumMlaVerifyInputs]{
      {"q", {"BF16"}, {-1, -1, kMlaKDim}},
      {"k_extend", {"BF16"}, {-1, 1, kMlaKDim}},
      // An fp8 e4m3 cache travels as UINT8 (KServe v2 has no fp8 datatype) with kjit_kv_dtype.
      {"kv_cache", {"BF16", "UINT8"}, {-1, 1, kMlaKDim}},
      {"qo_indptr", {"INT32", "INT64"}, {-1}, false, true},
      {"kv_indptr", {"INT32", "INT64"}, {-1}, false, true},
      {"kv_indices", {"INT64"}, {-1}},
      {"custom_mask", {"BOOL", "UINT8"}, {-1}, true},
      {"packed_mask", {"UINT32"}, {-1}, true},
      {"mask_indptr", {"INT64"}, {-1}, true, true},
      // V of the draft tokens is k_extend[..., :512]; a caller that has it separately may pass it
      // to have the kernels check that it agrees (error bit kMlaErrVExtendDiffers).
      {"v_extend", {"BF16"}, {-1, 1, kMlaVDim}, true},
  };
  return {schema, kNumMlaVerifyInputs};
}

std::span<const TensorSchema> MlaVerifyOutputSchema() {
  static const TensorSchema* const schema = new TensorSchema[kNumMlaVerifyOutputs]{
      {"o", {"BF16"}, {-1, -1, kMlaVDim}},
      {"lse", {"FP32"}, {-1, -1}, true},
  };
  return {schema, kNumMlaVerifyOutputs};
}

std::span<const ParamSchema> MlaVerifyParamSchema() {
  using Kind = ParamSchema::Kind;
  static const ParamSchema* const schema = new ParamSchema[kNumMlaVerifyParams]{
      {"sm_scale", Kind::kNumber, /*required=*/true},
      {"k_scale", Kind::kNumber},
      {"v_scale", Kind::kNumber},
      {"is_causal", Kind::kBool},
      // Bounds for a launch whose index pointers stay on the GPU (FamilyLaunch::AssumeBounds).
      {"kjit_max_draft", Kind::kInt, false, 1, kMlaMaxDraft},
      {"kjit_max_prefix", Kind::kInt, false, 0},
      // kv_cache's element type: "bf16" (the default) or "fp8_e4m3" (with a UINT8 kv_cache).
      {"kjit_kv_dtype", Kind::kString},
      // How an fp8 cache is computed: "dequant" (the default) or "fp8" (SGLang's Triton numerics).
      {"kjit_fp8_numerics", Kind::kString},
  };
  return {schema, kNumMlaVerifyParams};
}

MlaVerifyScalars MlaVerifyScalarsOf(const TypedParams& params) {
  MlaVerifyScalars s;
  auto number = [&](int i) -> std::optional<double> {
    if (const double* d = std::get_if<double>(&params[i])) return *d;
    return std::nullopt;
  };
  s.sm_scale = number(kParamSmScale);
  s.k_scale = number(kParamKScale);
  s.v_scale = number(kParamVScale);
  if (const bool* b = std::get_if<bool>(&params[kParamIsCausal])) s.is_causal = *b;
  if (const std::string* d = std::get_if<std::string>(&params[kParamKvDtype])) s.kv_dtype = *d;
  if (const std::string* n = std::get_if<std::string>(&params[kParamFp8Numerics])) s.fp8_numerics = *n;
  return s;
}

MlaVerifyHints MlaVerifyHintsOf(const TypedParams& params) {
  MlaVerifyHints h;
  if (const int64_t* d = std::get_if<int64_t>(&params[kParamMaxDraft])) h.max_draft = *d;
  if (const int64_t* p = std::get_if<int64_t>(&params[kParamMaxPrefix])) h.max_prefix = *p;
  return h;
}

namespace {

// Which schema tensor each request tensor is: unknown or repeated names, missing required inputs
// and the mask inputs' combinations are errors.
StatusOr<MlaVerifyLayout> Bind(std::span<const TensorDesc> inputs, std::span<const TensorDesc> outputs) {
  MlaVerifyLayout lay;
  const std::span<const TensorSchema> schema = MlaVerifyInputSchema();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int slot = SchemaIndex(schema, inputs[i].name);
    if (slot < 0) {
      std::string known;
      for (const TensorSchema& t : schema) absl::StrAppend(&known, known.empty() ? "" : ", ", t.name);
      return Bad(ClientText(inputs[i].name), absl::StrCat("unknown input (expected ", known, ")"));
    }
    if (lay.input_slot[slot] >= 0) return Bad(inputs[i].name, "given twice");
    lay.input_slot[slot] = static_cast<int>(i);
  }
  for (int s : {kInQ, kInKExtend, kInKvCache, kInQoIndptr, kInKvIndptr, kInKvIndices}) {
    if (lay.input_slot[s] < 0) return Bad(schema[s].name, "required input missing");
  }
  const bool bool_mask = lay.input_slot[kInCustomMask] >= 0;
  const bool packed_mask = lay.input_slot[kInPackedMask] >= 0;
  if (bool_mask == packed_mask) {
    return Bad(bool_mask ? "custom_mask" : "custom_mask/packed_mask",
               "exactly one of custom_mask and packed_mask is required");
  }
  if (bool_mask && lay.input_slot[kInMaskIndptr] < 0) {
    return Bad("mask_indptr", "required with custom_mask");
  }
  if (packed_mask && lay.input_slot[kInMaskIndptr] >= 0) {
    return Bad("mask_indptr", "only used with custom_mask (packed rows are implied by qo_indptr)");
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    int* slot = outputs[i].name == "o" ? &lay.o_output
                : outputs[i].name == "lse" ? &lay.lse_output : nullptr;
    if (slot == nullptr) return Bad(ClientText(outputs[i].name), "unknown output (expected o, lse)");
    if (*slot >= 0) return Bad(outputs[i].name, "requested twice");
    *slot = static_cast<int>(i);
  }
  if (lay.o_output < 0) return Bad("o", "output o must be requested");
  return lay;
}

// Rows of q, k_extend, v_extend and o may be strided (views of larger tensors; the plan checks that
// rows do not overlap); their last dimension, kv_cache's rows and every other tensor are dense.
Status CheckStrides(std::span<const TensorDesc> inputs, std::span<const TensorDesc> outputs,
                    const MlaVerifyLayout& lay, MlaVerifyProblem* p) {
  auto in = [&](int s) -> const TensorDesc* { return lay.input_slot[s] >= 0 ? &inputs[lay.input_slot[s]] : nullptr; };
  for (int s = 0; s < kNumMlaVerifyInputs; ++s) {
    const TensorDesc* t = in(s);
    if (t == nullptr) continue;
    KJIT_RETURN_IF_ERROR(StrideIs(*t, t->shape.size() - 1, 1, "the last dimension is dense"));
  }
  KJIT_RETURN_IF_ERROR(StrideIs(*in(kInKvCache), 0, kMlaKDim, "kv_cache rows are 576 elements apart"));
  const TensorDesc& q = *in(kInQ);
  p->q_stride_h = q.shape[1] <= 1 ? kMlaKDim : StrideOf(q, 1);
  p->q_stride_n = StrideOf(q, 0);
  p->k_extend_stride_n = StrideOf(*in(kInKExtend), 0);
  p->check_v_extend = in(kInVExtend) != nullptr;
  p->v_extend_stride_n = p->check_v_extend ? StrideOf(*in(kInVExtend), 0) : kMlaVDim;
  const TensorDesc& o = outputs[lay.o_output];
  KJIT_RETURN_IF_ERROR(StrideIs(o, 2, 1, "the last dimension is dense"));
  p->o_stride_h = o.shape[1] <= 1 ? kMlaVDim : StrideOf(o, 1);
  p->o_stride_n = StrideOf(o, 0);
  if (lay.lse_output >= 0) {  // the kernels write lse densely
    const TensorDesc& lse = outputs[lay.lse_output];
    KJIT_RETURN_IF_ERROR(StrideIs(lse, 1, 1, "lse is dense"));
    KJIT_RETURN_IF_ERROR(StrideIs(lse, 0, lse.shape[1], "lse is dense"));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<MlaVerifyProblem> CheckMlaVerifyShapes(std::span<const TensorDesc> inputs,
                                                std::span<const TensorDesc> outputs,
                                                const MlaVerifyScalars& scalars,
                                                MlaVerifyLayout* layout) {
  KJIT_ASSIGN_OR_RETURN(const MlaVerifyLayout lay, Bind(inputs, outputs));
  const bool bool_mask = lay.input_slot[kInCustomMask] >= 0;
  auto in = [&](int s) -> const TensorDesc& { return inputs[lay.input_slot[s]]; };

  const TensorDesc& q = in(kInQ);
  KJIT_RETURN_IF_ERROR(CheckTensor(q, MlaVerifyInputSchema()[kInQ], true));
  KJIT_RETURN_IF_ERROR(Dim(q, 2, kMlaKDim, "latent 512 + rope 64"));
  const int64_t n = q.shape[0], h = q.shape[1];
  if (h < 1 || h > 1024) return Bad("q", absl::StrCat("head count ", h, " outside [1, 1024]"));
  const TensorDesc& ke = in(kInKExtend);
  KJIT_RETURN_IF_ERROR(CheckTensor(ke, MlaVerifyInputSchema()[kInKExtend], true));
  KJIT_RETURN_IF_ERROR(Dim(ke, 0, n, "N from q"));
  KJIT_RETURN_IF_ERROR(Dim(ke, 1, 1, "one latent row per token"));
  KJIT_RETURN_IF_ERROR(Dim(ke, 2, kMlaKDim, "latent 512 + rope 64"));
  const TensorDesc& kv = in(kInKvCache);
  KJIT_RETURN_IF_ERROR(CheckTensor(kv, MlaVerifyInputSchema()[kInKvCache], true));
  KJIT_RETURN_IF_ERROR(Dim(kv, 1, 1, "one latent row per slot"));
  KJIT_RETURN_IF_ERROR(Dim(kv, 2, kMlaKDim, "latent 512 + rope 64"));
  const TensorDesc& qo = in(kInQoIndptr);
  KJIT_RETURN_IF_ERROR(CheckTensor(qo, MlaVerifyInputSchema()[kInQoIndptr], true));
  // Bounded here, for every family, before the index pointers are copied to the host and checked:
  // a batch in the billions of a sparse shared-memory object would cost gigabytes.
  const int64_t b = qo.shape[0] - 1;
  if (b < 1 || b > kMlaMaxBatch) {
    return Bad("qo_indptr", absl::StrCat("needs B+1 entries for a batch of B = 1 to ", kMlaMaxBatch,
                                         " requests, got ", qo.shape[0]));
  }
  const TensorDesc& kvp = in(kInKvIndptr);
  KJIT_RETURN_IF_ERROR(CheckTensor(kvp, MlaVerifyInputSchema()[kInKvIndptr], true));
  KJIT_RETURN_IF_ERROR(Dim(kvp, 0, b + 1, "B+1 from qo_indptr"));
  const TensorDesc& kvi = in(kInKvIndices);
  KJIT_RETURN_IF_ERROR(CheckTensor(kvi, MlaVerifyInputSchema()[kInKvIndices], true));
  if (lay.input_slot[kInVExtend] >= 0) {
    const TensorDesc& ve = in(kInVExtend);
    KJIT_RETURN_IF_ERROR(CheckTensor(ve, MlaVerifyInputSchema()[kInVExtend], true));
    KJIT_RETURN_IF_ERROR(Dim(ve, 0, n, "N from q"));
    KJIT_RETURN_IF_ERROR(Dim(ve, 1, 1, "one value row per token"));
    KJIT_RETURN_IF_ERROR(Dim(ve, 2, kMlaVDim, "value width 512"));
  }

  MlaVerifyProblem p;
  if (bool_mask) {
    KJIT_RETURN_IF_ERROR(CheckTensor(in(kInCustomMask), MlaVerifyInputSchema()[kInCustomMask], true));
    const TensorDesc& mi = in(kInMaskIndptr);
    KJIT_RETURN_IF_ERROR(CheckTensor(mi, MlaVerifyInputSchema()[kInMaskIndptr], true));
    KJIT_RETURN_IF_ERROR(Dim(mi, 0, b + 1, "B+1 from qo_indptr"));
    p.mask_kind = MaskKind::kBool;
    p.mask_len = in(kInCustomMask).shape[0];
  } else {
    KJIT_RETURN_IF_ERROR(CheckTensor(in(kInPackedMask), MlaVerifyInputSchema()[kInPackedMask], true));
    p.mask_kind = MaskKind::kPacked;
    p.mask_len = in(kInPackedMask).shape[0];
  }

  const TensorDesc& o = outputs[lay.o_output];
  KJIT_RETURN_IF_ERROR(CheckTensor(o, MlaVerifyOutputSchema()[kOutO], false));
  KJIT_RETURN_IF_ERROR(Dim(o, 0, n, "N from q"));
  KJIT_RETURN_IF_ERROR(Dim(o, 1, h, "H from q"));
  KJIT_RETURN_IF_ERROR(Dim(o, 2, kMlaVDim, "value width 512"));
  if (lay.lse_output >= 0) {
    const TensorDesc& lse = outputs[lay.lse_output];
    KJIT_RETURN_IF_ERROR(CheckTensor(lse, MlaVerifyOutputSchema()[kOutLse], false));
    KJIT_RETURN_IF_ERROR(Dim(lse, 0, n, "N from q"));
    KJIT_RETURN_IF_ERROR(Dim(lse, 1, h, "H from q"));
  }

  if (!scalars.sm_scale.has_value()) {
    return absl::InvalidArgumentError("parameter 'sm_scale' is required");
  }
  KJIT_RETURN_IF_ERROR(Scale("sm_scale", scalars.sm_scale, 0, &p.sm_scale));
  KJIT_RETURN_IF_ERROR(Scale("k_scale", scalars.k_scale, 1.0, &p.k_scale));
  KJIT_RETURN_IF_ERROR(Scale("v_scale", scalars.v_scale, 1.0, &p.v_scale));
  KJIT_RETURN_IF_ERROR(ScaleProducts(p));
  KJIT_RETURN_IF_ERROR(KvType(kv, scalars, &p));
  p.is_causal = scalars.is_causal.value_or(true);
  p.qo_indptr_64 = qo.datatype == "INT64";
  p.kv_indptr_64 = kvp.datatype == "INT64";
  p.batch = static_cast<int>(b);
  p.num_heads = static_cast<int>(h);
  p.num_q = n;
  p.num_slots = kv.shape[0];
  p.num_kv_indices = kvi.shape[0];
  p.write_lse = lay.lse_output >= 0;
  KJIT_RETURN_IF_ERROR(CheckStrides(inputs, outputs, lay, &p));
  *layout = lay;
  return p;
}

Status CheckMlaVerifyIndptrs(std::span<const int32_t> qo, std::span<const int32_t> kv,
                             std::span<const int64_t> mask, MlaVerifyProblem* p) {
  const std::vector<int64_t> qo64(qo.begin(), qo.end()), kv64(kv.begin(), kv.end());
  return CheckMlaVerifyIndptrs(std::span<const int64_t>(qo64), std::span<const int64_t>(kv64), mask, p);
}

Status CheckMlaVerifyIndptrs(std::span<const int64_t> qo, std::span<const int64_t> kv,
                             std::span<const int64_t> mask, MlaVerifyProblem* p) {
  const size_t b = static_cast<size_t>(p->batch);
  if (qo.size() != b + 1) return Bad("qo_indptr", absl::StrCat("has ", qo.size(), " entries, expected ", b + 1));
  if (kv.size() != b + 1) return Bad("kv_indptr", absl::StrCat("has ", kv.size(), " entries, expected ", b + 1));
  const bool bool_mask = p->mask_kind == MaskKind::kBool;
  if (bool_mask && mask.size() != b + 1) {
    return Bad("mask_indptr", absl::StrCat("has ", mask.size(), " entries, expected ", b + 1));
  }
  // The contents come from client memory: messages say what is wrong, never the values (a client
  // may name memory it could not read itself), and no difference is taken that could overflow.
  if (qo[0] != 0) return Bad("qo_indptr", "entry 0 is not 0");
  if (kv[0] != 0) return Bad("kv_indptr", "entry 0 is not 0");
  if (bool_mask && mask[0] < 0) return Bad("mask_indptr", "entry 0 is negative");
  // One tensor at a time, so that an error names the tensor that is wrong, not a later victim.
  int max_draft = 0;
  int64_t packed_words = 0;
  for (size_t i = 0; i < b; ++i) {
    // qo[i] is in [0, 64 i] by now: qo[i] + 64 cannot overflow.
    if (qo[i + 1] < qo[i] + 1 || qo[i + 1] > qo[i] + kMlaMaxDraft) {
      return Bad("qo_indptr", absl::StrCat("request ", i, " has a draft token count outside 1..", kMlaMaxDraft));
    }
    const int64_t d = qo[i + 1] - qo[i];
    max_draft = std::max(max_draft, static_cast<int>(d));
    packed_words += d * ((d + 31) / 32);
  }
  if (qo[b] != p->num_q) {
    return Bad("qo_indptr", absl::StrCat("does not end at N = ", p->num_q, " (rows of q)"));
  }
  int64_t max_prefix = 0;
  for (size_t i = 0; i < b; ++i) {
    if (kv[i + 1] < kv[i]) return Bad("kv_indptr", absl::StrCat("decreases at request ", i));
    max_prefix = std::max(max_prefix, kv[i + 1] - kv[i]);  // both >= 0
  }
  if (kv[b] > p->num_kv_indices) {
    return Bad("kv_indptr", absl::StrCat("ends beyond kv_indices' ", p->num_kv_indices, " entries"));
  }
  if (bool_mask) {
    for (size_t i = 0; i < b; ++i) {
      const int64_t d = qo[i + 1] - qo[i];
      // P_b <= kv_indices' length, a real buffer's (< 2^44 entries): no overflow.
      const int64_t want = d * (kv[i + 1] - kv[i] + d);
      if (mask[i + 1] < mask[i] || mask[i + 1] - mask[i] != want) {  // mask[i] >= mask[0] >= 0
        return Bad("mask_indptr", absl::StrCat("request ", i, " does not span D*(P+D) mask entries"));
      }
    }
    if (mask[b] > p->mask_len) {
      return Bad("mask_indptr", absl::StrCat("ends beyond custom_mask's ", p->mask_len, " entries"));
    }
  } else if (packed_words > p->mask_len) {
    return Bad("packed_mask", absl::StrCat("has ", p->mask_len, " words, fewer than the draft rows need"));
  }
  p->max_draft = max_draft;
  p->max_prefix = max_prefix;
  return absl::OkStatus();
}

}  // namespace kjit::kernels
