// Draft-tree mask: may draft row r attend draft column c of request b?
// Bool: byte mask_indptr[b] + r * (P_b + D_b) + P_b + c (SGLang's layout, last D_b columns read).
// Packed: request b's rows start at word sum_{b'<b} D_b' * ceil(D_b'/32); row r has ceil(D_b/32)
// words, bit c % 32 of word c / 32. is_causal ignores bits above the diagonal. Out-of-range mask
// offsets read as "not allowed" and raise kErrBadIndptr.
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
        const long long d = p.qo_indptr[i + 1] - p.qo_indptr[i];
        w += d > 0 ? d * ((d + 31) / 32) : 0;
      }
      base = w;
      row_pitch = (rq.draft + 31) / 32;
      ok = base >= 0 && base + row_pitch * rq.draft <= p.mask_len;
    } else {
      base = p.mask_indptr[b] + rq.prefix;
      row_pitch = rq.prefix + rq.draft;
      ok = p.mask_indptr[b] >= 0 && base + row_pitch * (rq.draft - 1) + rq.draft <= p.mask_len;
    }
  }

  __device__ __forceinline__ bool Allowed(const MlaVerifyParams& p, int r, int c, int draft) const {
    if (!ok || c >= draft || r >= draft) return false;
    if (p.is_causal && c > r) return false;
    if (kPacked) {
      const unsigned* words = static_cast<const unsigned*>(p.mask);
      return (words[base + r * row_pitch + (c >> 5)] >> (c & 31)) & 1u;
    }
    const unsigned char* bytes = static_cast<const unsigned char*>(p.mask);
    return bytes[base + r * row_pitch + c] != 0;
  }
};

}  // namespace mla
}  // namespace kjit
