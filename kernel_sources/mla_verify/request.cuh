// One request's bounds, read on the device and validated against the sizes the host checked, so a
// corrupt indptr skips the request (and sets an error bit) instead of faulting.
#pragma once

#include "common/softmax.cuh"
#include "mla_verify/params.h"
#include "mla_verify/traits.h"

namespace kjit {
namespace mla {

struct Request {
  long long q0;   // first row of q / k_extend / o
  int draft;      // D_b
  long long kv0;  // first entry of kv_indices
  long long prefix;  // P_b
  bool ok;
};

// Entry i of an index pointer of int32 or int64 entries (SGLang's CUDA-graph buffers hold int64).
__device__ __forceinline__ long long IndptrAt(const void* indptr, int is_64, long long i) {
  return is_64 ? static_cast<const long long*>(indptr)[i] : static_cast<const int*>(indptr)[i];
}

__device__ __forceinline__ Request LoadRequest(const MlaVerifyParams& p, int b) {
  const long long q0 = IndptrAt(p.qo_indptr, p.qo_indptr_64, b), q1 = IndptrAt(p.qo_indptr, p.qo_indptr_64, b + 1);
  const long long k0 = IndptrAt(p.kv_indptr, p.kv_indptr_64, b), k1 = IndptrAt(p.kv_indptr, p.kv_indptr_64, b + 1);
  Request r;
  r.ok = 0 <= q0 && q0 <= q1 && q1 <= p.num_q && q1 - q0 <= p.max_draft && 0 <= k0 && k0 <= k1 &&
         k1 <= p.num_kv_indices;
  r.q0 = q0;
  r.draft = r.ok ? static_cast<int>(q1 - q0) : 0;
  r.kv0 = k0;
  r.prefix = r.ok ? k1 - k0 : 0;
  return r;
}

// The split a CTA computes. The grid is (m-tiles, batch, num_splits + 1) and CTAs launch in that
// order (m-tile fastest): slab z < num_splits is prefix chunk z + 1 of every request and the last
// slab is the draft tree (split 0). So when the grid is a little larger than one wave, the CTAs
// left for the second wave are short tree CTAs, not prefix chunks that would end a whole chunk
// after the others. (Reading %ctaid.z through volatile inline assembly instead made ptxas emit
// twice the branches in the sm_90a kernel, 1.6x slower on the H200.)
__device__ __forceinline__ int SplitOfCta() {
  return blockIdx.z + 1 == gridDim.z ? 0 : static_cast<int>(blockIdx.z) + 1;
}

// The partial state of (request b, split) in the workspace: rows_cap log2-LSEs and rows_cap rows of
// bf16 partial O.
struct StateRows {
  float* lse;
  unsigned short* o;
};
__device__ __forceinline__ StateRows StateOf(const MlaVerifyParams& p, int b, int split) {
  const long long state = static_cast<long long>(b) * (p.num_splits + 1) + split;
  return {p.part_lse + state * p.rows_cap, p.part_o + state * p.rows_cap * kVDim};
}

// Prefix rows [begin, end) of split s (1-based; 0 is the tree part). Chunks are whole KV tiles so
// every CTA but the last streams full tiles; the chunk adapts to the P_b read on the device.
template <int kKvTile>
__device__ __forceinline__ void PrefixChunk(long long prefix, int num_splits, int s,
                                            long long* begin, long long* end) {
  const long long tiles = (prefix + kKvTile - 1) / kKvTile;
  const long long per_split = (tiles + num_splits - 1) / num_splits;
  long long b = static_cast<long long>(s - 1) * per_split * kKvTile;
  long long e = b + per_split * kKvTile;
  if (b > prefix) b = prefix;
  if (e > prefix) e = prefix;
  *begin = b;
  *end = e;
}

// Where a split's KV rows come from: kv_cache slots listed in kv_indices (a prefix chunk) or the
// request's own k_extend rows (split 0, the draft tree). Raw(t, i) is KV row i of tile t as loaded
// (kPastEnd past the chunk); Validate(raw, t, i) turns it into a source row, or -1 when past the
// chunk or a slot out of range (kErrKvIndexOutOfRange is raised; the row is never dereferenced and
// its column is masked). "Past the chunk" is decided from the position, not from the value, so that
// no slot value (INT64_MIN included) passes for it, and Raw never waits for its load: the kernels
// load a tile's indices a tile ahead, and a compare in Raw put the load's latency on every tile
// (+3 us on K2, bench/results/gpu-suite-2026-12-03-h200-57504c0.md).
template <int kTile>
struct KvRows {
  static constexpr long long kPastEnd = -0x7fffffffffffffffLL - 1;
  const unsigned short* base;  // row r's first byte at (const char*)base + r * row_bytes
  long long row_bytes;
  long long begin, end, kv0;
  bool tree;

  // cache_elem_bytes: 2 for a bf16 cache, 1 for fp8 (k_extend rows are bf16 either way).
  __device__ __forceinline__ KvRows(const MlaVerifyParams& p, const Request& rq, bool is_tree, long long b,
                                    long long e, int cache_elem_bytes = 2)
      : base(is_tree ? p.k_extend + rq.q0 * p.k_extend_stride_n : p.kv_cache),
        row_bytes(is_tree ? p.k_extend_stride_n * 2 : static_cast<long long>(kKDim) * cache_elem_bytes),
        begin(b),
        end(e),
        kv0(rq.kv0),
        tree(is_tree) {}
  __device__ __forceinline__ long long Pos(int t, int i) const { return begin + static_cast<long long>(t) * kTile + i; }
  // What a producer stages for a row Validate returned: the row's first byte, or -1 (masked).
  __device__ __forceinline__ long long StagedAddress(long long v) const {
    return v >= 0 ? reinterpret_cast<long long>(reinterpret_cast<const char*>(base) + v * row_bytes) : -1;
  }
  __device__ __forceinline__ long long Raw(const MlaVerifyParams& p, int t, int i) const {
    const long long pos = Pos(t, i);
    if (pos >= end) return kPastEnd;
    return tree ? pos : p.kv_indices[kv0 + pos];
  }
  __device__ __forceinline__ long long Validate(const MlaVerifyParams& p, long long raw, int t, int i) const;
};

// A CTA whose chunk is empty writes an empty state (weight 0, O zeroed) for its rows, so the
// combine needs no special case.
__device__ __forceinline__ void WriteEmptyState(float* part_lse, unsigned short* part_o, int m0, int rows_b,
                                                int tile_rows, int tid, int threads) {
  const int rows = rows_b - m0 < tile_rows ? rows_b - m0 : tile_rows;
  for (int r = tid; r < rows; r += threads) part_lse[m0 + r] = NegInf();
  uint4* dst = reinterpret_cast<uint4*>(part_o + static_cast<long long>(m0) * kVDim);
  for (int i = tid; i < rows * (kVDim / 8); i += threads) dst[i] = make_uint4(0u, 0u, 0u, 0u);
}

// The calling CTA's error bits, in shared memory: MlaVerifySplit zeroes them before the split body
// and stores them to the CTA's error slot after it; the combine ORs the slots into the error word.
__device__ __forceinline__ unsigned& CtaErrors() {
  __shared__ unsigned errors;
  return errors;
}

__device__ __forceinline__ void RaiseError(unsigned bits) {
  atomicOr(&CtaErrors(), bits);  // an OR of flags: the result does not depend on the order
}

// V of the draft tokens is read from k_extend[..., :512]; a caller that also passes v_extend has it
// compared here, by the first tree CTA of each request: its D_b rows of 1 KB, 16 bytes a thread.
__device__ __forceinline__ void CheckVExtend(const MlaVerifyParams& p, const Request& rq) {
  if (p.v_extend == nullptr || !rq.ok) return;
  constexpr int kChunks = kVDim / 8;  // 16-byte chunks of a row
  bool differs = false;
  for (int i = threadIdx.x; i < rq.draft * kChunks; i += blockDim.x) {
    const long long n = rq.q0 + i / kChunks;
    const int c = i % kChunks;
    const uint4 k = *reinterpret_cast<const uint4*>(p.k_extend + n * p.k_extend_stride_n + c * 8);
    const uint4 v = *reinterpret_cast<const uint4*>(p.v_extend + n * p.v_extend_stride_n + c * 8);
    differs |= k.x != v.x || k.y != v.y || k.z != v.z || k.w != v.w;
  }
  if (differs) RaiseError(kErrVExtendDiffers);
}

template <int kTile>
__device__ __forceinline__ long long KvRows<kTile>::Validate(const MlaVerifyParams& p, long long raw, int t,
                                                             int i) const {
  if (Pos(t, i) >= end) return -1;
  if (!tree && (raw < 0 || raw >= p.num_slots)) {
    RaiseError(kErrKvIndexOutOfRange);
    return -1;
  }
  return raw;
}

// The prologue of every split body: this CTA's request and rows. Returns false when the CTA has
// nothing to compute: a bad request (reported once) or an m-tile past the request's rows. Either
// way, first, the rows of the CTA's tile that its read of the request leaves uncovered (m0..m0 +
// kTileRows, within rows_cap) get an empty state: the combine reads the index pointers again, and
// where a client rewrites them during an asynchronous launch, the combine must find in every row it
// merges this launch's state or an empty one, never a row that an earlier launch (another client's)
// left in the shared workspace.
struct SplitCta {
  Request rq;
  int rows_b;  // the request's query rows (D_b * H) as this CTA read them, at most its own last + 1
  int m0;      // the CTA's first row
};
// kMayHalve: the caller is an sm_90a tile, which kHalfTileBit may give half its rows (params.h);
// the other tiles never read the bit.
template <int kHeads, int kTileRows, bool kMayHalve = false>
__device__ __forceinline__ bool BeginSplitCta(const MlaVerifyParams& p, int b, int split, int m_tile, int tid,
                                              int threads, SplitCta* cta) {
  cta->rq = LoadRequest(p, b);
  cta->rows_b = cta->rq.draft * kHeads;  // 0 for a bad request
  // The CTA's rows: its whole tile, or with kHalfTileBit the first half of one (params.h).
  const int rows = kMayHalve && (p.flags & kHalfTileBit) != 0 ? kTileRows / 2 : kTileRows;
  cta->m0 = m_tile * rows;
  const int first = cta->m0 > cta->rows_b ? cta->m0 : cta->rows_b;
  const int end = cta->m0 + rows < p.rows_cap ? cta->m0 + rows : p.rows_cap;
  if (first < end) {
    float* lse = StateOf(p, b, split).lse;
    for (int r = first + tid; r < end; r += threads) lse[r] = NegInf();
  }
  // Rows past the CTA's are the next CTA's: as if past the request (no Q loaded, nothing written).
  if constexpr (kMayHalve) {
    if (cta->rows_b > cta->m0 + rows) cta->rows_b = cta->m0 + rows;
  }
  if (!cta->rq.ok) {
    if (tid == 0 && split == 0 && m_tile == 0) RaiseError(kErrBadIndptr);
    return false;
  }
  return cta->m0 < cta->rows_b;
}

}  // namespace mla
}  // namespace kjit
