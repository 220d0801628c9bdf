// The merge without a combine launch (sm_90 and later; the plan's MlaVerifyPlan::main.cluster): the
// split kernel is launched in clusters of num_splits + 1 CTAs along the grid's z, so that the states
// of one m-tile of one request (the tree part and every prefix chunk) run at once in one cluster.
// Each CTA writes its partial state to the workspace as it would for the combine; after a cluster
// barrier (release / acquire at cluster scope), the CTA of rank r merges rows r * ceil(rows / C) ..
// of the m-tile from the C states (just written, so L2-resident; loaded past L1) in state order, so
// the result is bitwise deterministic, and writes o and lse as the combine does.
//
// The error word: each cluster's rank 0, after the barrier (every slot of its cluster written and
// fenced), takes a ticket from a tagged counter in the workspace's header; the one that takes the
// last of the launch's clusters ORs every slot into the error word. The counter returns to "tag,
// zero" at the end of every launch, so nothing is zeroed in-stream and a graph replay reports its own
// errors. The tag (the launch's cluster count) makes a counter holding anything else, such as a
// fresh workspace's garbage or another plan's tag, count as zero.
#pragma once

#include "common/bf16.cuh"
#include "common/softmax.cuh"
#include "mla_verify/combine.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"

namespace kjit {
namespace mla {

// CTAs of the calling CTA's cluster (1 when launched without clusters, and before sm_90) and its
// rank there.
__device__ __forceinline__ unsigned ClusterCtas() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
#else
  return 1;
#endif
}

__device__ __forceinline__ unsigned ClusterRank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#else
  return 0;
#endif
}

// Every thread of every CTA of the cluster: its earlier memory operations are visible to the
// cluster's threads after it.
__device__ __forceinline__ void ClusterBarrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// Merges this CTA's share of the rows [m0, m0 + kRows) of request blockIdx.y from the cluster's
// states, with `threads` threads (64 per row: 8 output columns each).
template <int kHeads, int kRows>
__device__ __forceinline__ void MergeClusterRows(const MlaVerifyParams& p, int threads, unsigned ctas) {
  const int b = blockIdx.y;
  const Request rq = LoadRequest(p, b);  // a bad request was reported by its tree CTA
  if (!rq.ok) return;
  const int states = static_cast<int>(ctas);  // == num_splits + 1 (the launcher checks it)
  const int rows_b = rq.draft * kHeads, m0 = static_cast<int>(blockIdx.x) * kRows;
  const int per = (kRows + states - 1) / states;
  const int r0 = m0 + static_cast<int>(ClusterRank()) * per;
  int r1 = r0 + per;
  if (r1 > m0 + kRows) r1 = m0 + kRows;
  if (r1 > rows_b) r1 = rows_b;
  const StateRows first = StateOf(p, b, 0);
  const long long lse_stride = p.rows_cap;
  const long long o_stride = static_cast<long long>(p.rows_cap) * (kVDim / 8);  // in uint4
  for (int item = threadIdx.x; item < (r1 - r0) * (kVDim / 8); item += threads) {
    const int row = r0 + item / (kVDim / 8), c16 = item % (kVDim / 8);
    const uint4* src = reinterpret_cast<const uint4*>(first.o + static_cast<long long>(row) * kVDim) + c16;
    float lse[kClusterMaxStates];
    uint4 v[kClusterMaxStates];
#pragma unroll
    for (int s = 0; s < kClusterMaxStates; ++s) {  // every load before any use: one round trip
      lse[s] = NegInf();
      v[s] = make_uint4(0u, 0u, 0u, 0u);
      if (s < states) {
        lse[s] = __ldcg(first.lse + s * lse_stride + row);
        v[s] = __ldcg(src + s * o_stride);
      }
    }
    float mx = NegInf();
#pragma unroll
    for (int s = 0; s < kClusterMaxStates; ++s) mx = fmaxf(mx, lse[s]);
    const bool empty = mx == NegInf();  // every state empty: zeros, LSE -inf
    float sum = 0.f, acc[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[c] = 0.f;
#pragma unroll
    for (int s = 0; s < kClusterMaxStates; ++s) {  // state order: deterministic
      if (s >= states || empty) break;
      const float w = FastExp2(lse[s] - mx);
      sum += w;
      const unsigned words[4] = {v[s].x, v[s].y, v[s].z, v[s].w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        acc[2 * c] += w * __uint_as_float(words[c] << 16);
        acc[2 * c + 1] += w * __uint_as_float(words[c] & 0xffff0000u);
      }
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const long long n = rq.q0 + row / kHeads;
    const int h = row % kHeads;
    // Two 8-byte stores: o rows are only 8-byte aligned (o_stride_h % 4 == 0).
    uint2* dst = reinterpret_cast<uint2*>(p.o + n * p.o_stride_n + h * p.o_stride_h + c16 * 8);
    dst[0] = make_uint2(PackBf16x2(acc[0] * inv, acc[1] * inv), PackBf16x2(acc[2] * inv, acc[3] * inv));
    dst[1] = make_uint2(PackBf16x2(acc[4] * inv, acc[5] * inv), PackBf16x2(acc[6] * inv, acc[7] * inv));
    if (p.lse != nullptr && c16 == 0)
      p.lse[n * kHeads + h] = empty ? NegInf() : (mx + __log2f(sum)) * 0.69314718055994531f;
  }
}

// Whether the calling cluster is the launch's last to finish (thread 0 of rank 0 only): a ticket
// from the counter in the workspace's header, tagged with the cluster count.
__device__ __forceinline__ bool TakeLastTicket(const MlaVerifyParams& p, unsigned clusters) {
  unsigned long long* counter = reinterpret_cast<unsigned long long*>(
      reinterpret_cast<char*>(p.error_slots) - kErrorSlotsOffset + kTicketOffset);
  const unsigned long long tag = static_cast<unsigned long long>(clusters ^ kTicketTagMix) << 32;
  unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(counter), assumed, count;
  do {
    assumed = seen;
    count = (assumed & 0xffffffff00000000ull) == tag ? (assumed & 0xffffffffull) : 0;
    if (count >= clusters) count = 0;
    const unsigned long long next = count + 1 == clusters ? tag : tag | (count + 1);
    seen = atomicCAS(counter, assumed, next);
  } while (seen != assumed);
  return count + 1 == clusters;
}

// The merge mode's tail, by every thread of the CTA (after its error slot is written): the cluster
// barrier, this CTA's share of the merge (by its first merge_threads threads), the error word.
template <int kHeads, int kRows>
__device__ __forceinline__ void ClusterMergeTail(const MlaVerifyParams& p, int merge_threads, unsigned ctas) {
  if (threadIdx.x == 0) __threadfence();  // this CTA's error slot, at L2 before the cluster's ticket
  ClusterBarrier();  // the cluster's partial states visible to its CTAs
  if (static_cast<int>(threadIdx.x) < merge_threads) MergeClusterRows<kHeads, kRows>(p, merge_threads, ctas);
  if (ClusterRank() != 0) return;  // uniform over the CTA
  __shared__ int last;
  if (threadIdx.x == 0) {
    const unsigned clusters = gridDim.x * gridDim.y * (gridDim.z / ctas);
    __threadfence();
    last = TakeLastTicket(p, clusters);
    __threadfence();  // the other clusters' slots, fenced before their tickets, are read after it
  }
  __syncthreads();
  if (last) PublishErrors(p);
}

}  // namespace mla
}  // namespace kjit
