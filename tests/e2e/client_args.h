// Test helper: a kjit_mla_verify call whose tensors are consistent but whose addresses are fake,
// for client tests that stop before the GPU (client_abi_test, client_restart_test).
#pragma once

#include <initializer_list>

#include "client/cpp/include/kjit_client.h"
#include "client/cpp/include/kjit_client.hpp"

namespace kjit::testing {

// A call with every required tensor, shapes consistent (B = 1, N = 2, H = 8, P = 3), fake addresses.
inline kjit_mla_verify_args ValidArgs() {
  kjit_mla_verify_args a = kjit::VerifyArgs();
  auto tensor = [](int64_t dtype, std::initializer_list<int64_t> shape, uint64_t data) {
    kjit_tensor t{};
    t.data = data;
    t.dtype = dtype;
    t.ndim = static_cast<int64_t>(shape.size());
    int i = 0;
    for (int64_t d : shape) t.shape[i++] = d;
    int64_t stride = 1;
    for (int k = static_cast<int>(t.ndim) - 1; k >= 0; --k) {
      t.strides[k] = stride;
      stride *= t.shape[k];
    }
    return t;
  };
  a.q = tensor(KJIT_DTYPE_BF16, {2, 8, 576}, 0x100000);
  a.k_extend = tensor(KJIT_DTYPE_BF16, {2, 1, 576}, 0x200000);
  a.kv_cache = tensor(KJIT_DTYPE_BF16, {4, 1, 576}, 0x300000);
  a.qo_indptr = tensor(KJIT_DTYPE_INT64, {2}, 0x400000);
  a.kv_indptr = tensor(KJIT_DTYPE_INT32, {2}, 0x500000);
  a.kv_indices = tensor(KJIT_DTYPE_INT64, {3}, 0x600000);
  a.custom_mask = tensor(KJIT_DTYPE_UINT8, {10}, 0x700000);
  a.mask_indptr = tensor(KJIT_DTYPE_INT64, {2}, 0x800000);
  a.o = tensor(KJIT_DTYPE_BF16, {2, 8, 512}, 0x900000);
  a.sm_scale = 0.14467963;
  a.max_draft = 2;
  return a;
}

}  // namespace kjit::testing
