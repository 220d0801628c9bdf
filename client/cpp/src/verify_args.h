// kjit_mla_verify_args as the family sees them: one TensorDesc per given tensor (schema names,
// protocol datatypes, shapes, strides, byte spans) with its device address, and the parameters.
// Every launch mode starts from this, so all of them check a call the same way.
#pragma once

#include <cuda.h>

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

// INVALID_ARGUMENT for a struct of another size, a bad dtype or rank, an absent required tensor.
StatusOr<VerifyCall> DescribeVerify(const kjit_mla_verify_args& args);

// v_extend that is k_extend[..., :512] itself (the same rows): nothing to check, so not passed on.
bool ViewOfKExtend(const kjit_tensor& v, const kjit_tensor& k);

// The protocol name of a KJIT_DTYPE_* ("BF16"), or "" when unknown.
const char* DatatypeName(int64_t dtype);

}  // namespace kjit::client
