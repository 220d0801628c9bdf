// Draft-tree mask: may draft row r attend draft column c of request b?
// Bool: byte mask_indptr[b] + r * (P_b + D_b) + P_b + c (SGLang's layout, last D_b columns read).
// Packed: request b's rows start at word sum_{b'<b} D_b' * ceil(D_b'/32); row r has ceil(D_b/32)
// words, bit c % 32 of word c / 32. A causal call (kCausalBit) ignores bits above the diagonal.
// Out-of-range mask offsets read as "not allowed" and raise kErrBadIndptr.
#pragma once

#include "mla_verify/params.h"
#include "mla_verify/request.cuh"

namespace kjit {
namespace mla {

template <bool kPacked>
struct TreeMask {
  long long base = 0;  // bool: mask_indptr[b] + P_b; packed: first word of the request
  long long row_pitch = 0;  // bool: P_b + D_b bytes; packed: words per row
  bool ok = false;

  __device__ __forceinline__ void Init(const MlaVerifyParams& p, int b, const Request& rq) {
    if (kPacked) {
      long long w = 0;
      for (int i = 0; i < b; ++i) {
        const long long d = IndptrAt(p.qo_indptr, p.qo_indptr_64, i + 1) - IndptrAt(p.qo_indptr, p.qo_indptr_64, i);
        w += d > 0 ? d * ((d + 31) / 32) : 0;
      }
      base = w;
      row_pitch = (rq.draft + 31) / 32;
      ok = base >= 0 && base + row_pitch * rq.draft <= p.mask_len;
    } else {
      // mask_indptr is client data: bound it before any sum with it can overflow (the request's
      // own extent is a product of real buffer sizes).
      const long long start = p.mask_indptr[b];
      row_pitch = rq.prefix + rq.draft;
      const long long extent = rq.prefix + row_pitch * (rq.draft - 1) + rq.draft;
      ok = start >= 0 && start <= p.mask_len && extent <= p.mask_len - start;
      base = ok ? start + rq.prefix : 0;
    }
  }

  // Branch-free: the load address is clamped into the mask and the result masked, so a caller
  // can issue all of a tile's loads back to back (they overlap the tile's Q.K^T).
  __device__ __forceinline__ bool Allowed(const MlaVerifyParams& p, int r, int c, int draft) const {
    const bool in_tree = ok && c < draft && r < draft && !((p.flags & kCausalBit) != 0 && c > r);
    if (kPacked) {
      long long i = base + r * row_pitch + (c >> 5);
      i = i < 0 ? 0 : (i >= p.mask_len ? p.mask_len - 1 : i);
      const unsigned w = p.mask_len > 0 ? static_cast<const unsigned*>(p.mask)[i] : 0u;
      return in_tree && ((w >> (c & 31)) & 1u);
    }
    long long i = base + r * row_pitch + c;
    i = i < 0 ? 0 : (i >= p.mask_len ? p.mask_len - 1 : i);
    const unsigned char v = p.mask_len > 0 ? static_cast<const unsigned char*>(p.mask)[i] : 0;
    return in_tree && v != 0;
  }
};

}  // namespace mla
}  // namespace kjit
