// Merge of partial softmax states (o_i normalized, lse_i in log2 units): fixed order, no atomics,
// so the result is bitwise reproducible. Empty states have lse = -inf and weight 0.
#pragma once

#include "common/softmax.cuh"

namespace kjit {

struct LseMerge {
  float max_lse;  // max over the states; -inf when every state is empty
  float weight_sum = 0.f;

  __device__ __forceinline__ explicit LseMerge(float m) : max_lse(m) {}
  __device__ __forceinline__ bool Empty() const { return max_lse == NegInf(); }
  // Weight of one state (0 for an empty one); adds it to the running sum.
  __device__ __forceinline__ float Add(float lse) {
    const float w = lse == NegInf() ? 0.f : FastExp2(lse - max_lse);
    weight_sum += w;
    return w;
  }
  // Natural-log LSE of the merged state.
  __device__ __forceinline__ float LseNatural() const {
    return Empty() ? NegInf() : (max_lse + __log2f(weight_sum)) * 0.69314718055994531f;
  }
};

}  // namespace kjit
