// kjit_mla_verify_args as the family sees them: one TensorDesc per given tensor (schema names,
// protocol datatypes, shapes, strides, byte spans) with its device address, and the parameters.
// Every launch mode starts from this, so all of them check a call the same way.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

#include "client/cpp/include/kjit_client.h"
#include "runtime/common/status.h"
#include "runtime/kernels/family.h"

namespace kjit::client {

struct VerifyCall {
  std::vector<kernels::TensorDesc> inputs, outputs;
  std::vector<CUdeviceptr> input_data, output_data;  // parallel to inputs / outputs
  std::vector<kernels::Param> params;                // the family's: scales, bounds
};

// The size of kjit_mla_verify_args from callers built before fp8_numerics.
inline constexpr uint64_t kVerifyArgsBeforeFp8Numerics = offsetof(kjit_mla_verify_args, fp8_numerics);

// The caller's arguments as this library's struct: `args` itself when its struct_size is
// sizeof(kjit_mla_verify_args), else (an older caller's size) a copy in *storage whose fields the
// caller did not have are 0. INVALID_ARGUMENT for any other size. Only struct_size is read before
// the size is known, so an older caller's smaller struct is never read past its end.
StatusOr<const kjit_mla_verify_args*> CurrentVerifyArgs(const kjit_mla_verify_args* args,
                                                        kjit_mla_verify_args* storage);

// INVALID_ARGUMENT for a struct of another size than this header's (CurrentVerifyArgs first), a
// bad dtype or rank, an absent required tensor, a bad fp8_numerics. An fp8 kv_cache
// (KJIT_DTYPE_FP8_E4M3 or KJIT_DTYPE_UINT8) is described as the protocol's UINT8 with parameter
// kjit_kv_dtype "fp8_e4m3", and fp8_numerics as kjit_fp8_numerics; any other tensor described as
// FP8_E4M3 is refused by the family's schema.
StatusOr<VerifyCall> DescribeVerify(const kjit_mla_verify_args& args);

// v_extend that is k_extend[..., :512] itself (the same rows): nothing to check, so not passed on.
bool ViewOfKExtend(const kjit_tensor& v, const kjit_tensor& k);

// The protocol name of a KJIT_DTYPE_* ("BF16"), or "" when unknown.
const char* DatatypeName(int64_t dtype);

}  // namespace kjit::client
