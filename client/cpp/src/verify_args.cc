#include "client/cpp/src/verify_args.h"

#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/mla_verify/schema.h"

namespace kjit::client {
namespace {

size_t ElementBytes(int64_t dtype) {
  switch (dtype) {
    case KJIT_DTYPE_BOOL:
    case KJIT_DTYPE_UINT8:
    case KJIT_DTYPE_FP8_E4M3: return 1;
    case KJIT_DTYPE_BF16:
    case KJIT_DTYPE_FP16: return 2;
    case KJIT_DTYPE_INT32:
    case KJIT_DTYPE_UINT32:
    case KJIT_DTYPE_FP32: return 4;
    case KJIT_DTYPE_INT64: return 8;
    default: return 0;
  }
}

// The bytes from the first element to the last (0 for an empty tensor); false on overflow or a
// negative stride.
bool SpanBytes(const kjit_tensor& t, uint64_t* bytes) {
  uint64_t last = 0;
  for (int64_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) {
      *bytes = 0;
      return true;
    }
  }
  for (int64_t i = 0; i < t.ndim; ++i) {
    if (t.strides[i] < 0 || t.shape[i] < 0) return false;
    const uint64_t step = static_cast<uint64_t>(t.strides[i]), extent = static_cast<uint64_t>(t.shape[i] - 1);
    if (step != 0 && extent > (std::numeric_limits<uint64_t>::max() / 16 - last) / step) return false;
    last += extent * step;
  }
  *bytes = (last + 1) * ElementBytes(t.dtype);
  return true;
}

Status Describe(const char* name, const kjit_tensor& t, std::vector<kernels::TensorDesc>* descs,
                std::vector<CUdeviceptr>* data) {
  if (t.ndim < 0 || t.ndim > 4) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ndim ", t.ndim, " outside 0..4"));
  }
  const char* dt = DatatypeName(t.dtype);
  if (*dt == '\0') return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': unknown dtype code ", t.dtype));
  kernels::TensorDesc d;
  d.name = name;
  d.datatype = dt;
  d.shape.assign(t.shape, t.shape + t.ndim);
  d.strides.assign(t.strides, t.strides + t.ndim);
  if (!SpanBytes(t, &d.byte_size)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': negative or overflowing shape or strides"));
  }
  descs->push_back(std::move(d));
  data->push_back(t.data);
  return absl::OkStatus();
}

bool Absent(const kjit_tensor& t) { return t.data == 0 && t.ndim == 0; }

Status SizeError(uint64_t struct_size) {
  return absl::InvalidArgumentError(absl::StrCat("kjit_mla_verify_args.struct_size is ", struct_size,
                                                 "; this library takes ", sizeof(kjit_mla_verify_args),
                                                 " (or ", kVerifyArgsBeforeFp8Numerics,
                                                 " from callers built before fp8_numerics): rebuild "
                                                 "against its kjit_client.h"));
}

bool Fp8Cache(const kjit_tensor& kv) { return kv.dtype == KJIT_DTYPE_FP8_E4M3 || kv.dtype == KJIT_DTYPE_UINT8; }

// kjit_kv_dtype and kjit_fp8_numerics from the cache's dtype and fp8_numerics.
Status CacheParams(const kjit_mla_verify_args& a, std::vector<kernels::Param>* params) {
  const bool fp8 = Fp8Cache(a.kv_cache);
  if (fp8) params->push_back({"kjit_kv_dtype", std::string("fp8_e4m3")});
  switch (a.fp8_numerics) {
    case KJIT_FP8_NUMERICS_DEQUANT: return absl::OkStatus();  // the family's default
    case KJIT_FP8_NUMERICS_FP8:
      if (!fp8 && a.kv_cache.dtype == KJIT_DTYPE_BF16) {
        return absl::InvalidArgumentError(
            "kjit_mla_verify_args.fp8_numerics is KJIT_FP8_NUMERICS_FP8 with a bf16 kv_cache: fp8 numerics "
            "apply to an fp8 cache (kv_cache dtype KJIT_DTYPE_FP8_E4M3 or KJIT_DTYPE_UINT8); set it to "
            "KJIT_FP8_NUMERICS_DEQUANT (0)");
      }
      params->push_back({"kjit_fp8_numerics", std::string("fp8")});
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("kjit_mla_verify_args.fp8_numerics is ", a.fp8_numerics,
                       "; use KJIT_FP8_NUMERICS_DEQUANT (0) or KJIT_FP8_NUMERICS_FP8 (1)"));
  }
}

}  // namespace

StatusOr<const kjit_mla_verify_args*> CurrentVerifyArgs(const kjit_mla_verify_args* args,
                                                        kjit_mla_verify_args* storage) {
  if (args->struct_size == sizeof(kjit_mla_verify_args)) return args;
  if (args->struct_size != kVerifyArgsBeforeFp8Numerics) return SizeError(args->struct_size);
  *storage = kjit_mla_verify_args{};
  std::memcpy(storage, args, kVerifyArgsBeforeFp8Numerics);
  storage->struct_size = sizeof(kjit_mla_verify_args);
  return storage;
}

bool ViewOfKExtend(const kjit_tensor& v, const kjit_tensor& k) {
  return v.data == k.data && v.ndim == 3 && k.ndim == 3 && v.shape[0] == k.shape[0] &&
         (v.shape[0] <= 1 || v.strides[0] == k.strides[0]) && v.strides[2] == 1 && k.strides[2] == 1 &&
         v.dtype == k.dtype;
}

const char* DatatypeName(int64_t dtype) {
  switch (dtype) {
    case KJIT_DTYPE_BOOL: return "BOOL";
    case KJIT_DTYPE_UINT8: return "UINT8";
    case KJIT_DTYPE_INT32: return "INT32";
    case KJIT_DTYPE_INT64: return "INT64";
    case KJIT_DTYPE_UINT32: return "UINT32";
    case KJIT_DTYPE_BF16: return "BF16";
    case KJIT_DTYPE_FP32: return "FP32";
    case KJIT_DTYPE_FP16: return "FP16";
    case KJIT_DTYPE_FP8_E4M3: return "FP8_E4M3";
    default: return "";
  }
}

StatusOr<VerifyCall> DescribeVerify(const kjit_mla_verify_args& a) {
  if (a.struct_size != sizeof(kjit_mla_verify_args)) return SizeError(a.struct_size);
  VerifyCall c;
  const std::span<const kernels::TensorSchema> in = kernels::MlaVerifyInputSchema();
  const kjit_tensor* inputs[kernels::kNumMlaVerifyInputs] = {};
  inputs[kernels::kInQ] = &a.q;
  inputs[kernels::kInKExtend] = &a.k_extend;
  inputs[kernels::kInKvCache] = &a.kv_cache;
  inputs[kernels::kInQoIndptr] = &a.qo_indptr;
  inputs[kernels::kInKvIndptr] = &a.kv_indptr;
  inputs[kernels::kInKvIndices] = &a.kv_indices;
  inputs[kernels::kInCustomMask] = &a.custom_mask;
  inputs[kernels::kInPackedMask] = &a.packed_mask;
  inputs[kernels::kInMaskIndptr] = &a.mask_indptr;
  inputs[kernels::kInVExtend] = &a.v_extend;
  if (ViewOfKExtend(a.v_extend, a.k_extend)) inputs[kernels::kInVExtend] = nullptr;
  for (int s = 0; s < kernels::kNumMlaVerifyInputs; ++s) {
    if (inputs[s] == nullptr || Absent(*inputs[s])) continue;  // the family says which may be absent
    KJIT_RETURN_IF_ERROR(Describe(in[s].name.c_str(), *inputs[s], &c.inputs, &c.input_data));
    // KServe v2 has no fp8 datatype: an fp8 cache travels as its bytes, with kjit_kv_dtype.
    if (s == kernels::kInKvCache && Fp8Cache(*inputs[s])) c.inputs.back().datatype = "UINT8";
  }
  KJIT_RETURN_IF_ERROR(Describe("o", a.o, &c.outputs, &c.output_data));
  if (!Absent(a.lse)) KJIT_RETURN_IF_ERROR(Describe("lse", a.lse, &c.outputs, &c.output_data));
  c.params = {{"sm_scale", a.sm_scale}, {"k_scale", a.k_scale}, {"v_scale", a.v_scale},
              {"is_causal", a.is_causal != 0}};
  if (a.max_draft != 0) c.params.push_back({"kjit_max_draft", a.max_draft});
  if (a.max_prefix >= 0) c.params.push_back({"kjit_max_prefix", a.max_prefix});
  KJIT_RETURN_IF_ERROR(CacheParams(a, &c.params));
  return c;
}

}  // namespace kjit::client
