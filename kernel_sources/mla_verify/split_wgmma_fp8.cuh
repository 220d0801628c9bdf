// The sm_90a split kernel's prefix CTAs over an fp8 e4m3 cache with fp8 numerics (SGLang's Triton
// numerics: q and P rounded to e4m3, MlaVerifySplit<H, mask, 0, 2>): both products on e4m3
// warpgroup MMAs, at twice bf16's rate, from the cache's bytes as they land (cp.async, half a bf16
// tile's bytes, nothing converted). The schedule is split_wgmma.cuh's: a producer warpgroup filling a
// 2-stage ring, two "seesaw" consumer warpgroups (warpgroup t % 2 computes tile t's Q.K^T and
// softmax, both add its P.V into their half of O). What differs (WgmmaFp8Smem):
// - Q is loaded by the consumers, rounded to e4m3 once and stored as e4m3.
// - e4m3 operands must be K-major, and V's reduction dim (the tokens) is not contiguous in the cache
//   rows: two producer warps write each landed tile's V transposed (vt), 16 tokens x 16 value dims
//   a block, by byte permutes, while the consumers already run the tile's Q.K^T; the other two stage
//   the indices and issue the copies.
// - P (e4m3) goes into the second half of the stage's group 4 (dims 512-575 use the first half).
// - This kernel computes the prefix chunks only (its grid's slab z is split z + 1): the draft tree
//   reads bf16 k_extend and is a launch of MlaVerifySplit<H, mask, 0, 1> of its own
//   (MlaVerifyPlan::tree_kernel).
// Measured: bench/results/kernel_bench-2026-12-06-h100-fp8-mma.md.
#pragma once

// KJIT_FP8MMA_PROMOTE (experiments only, kernel_bench --define or a copied kernel tree): Q.K^T in
// chains of that many k-steps added in fp32, to measure what the e4m3 MMAs' accumulation costs.
#ifndef KJIT_FP8MMA_PROMOTE
#define KJIT_FP8MMA_PROMOTE 0
#endif
// KJIT_FP8MMA_EXP (experiments only; wrong values): 1 = no V^T written, 2 = no cache rows copied.
#ifndef KJIT_FP8MMA_EXP
#define KJIT_FP8MMA_EXP 0
#endif

#include "common/bf16.cuh"
#include "common/cp_async.cuh"
#include "common/fp8.cuh"
#include "common/mbarrier.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "common/sync.cuh"
#include "common/wgmma.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"
#include "mla_verify/split_wgmma.cuh"
#include "mla_verify/timeline.cuh"
#include "mla_verify/traits.h"
#include "mla_verify/wgmma_consumer.cuh"

namespace kjit {
namespace mla {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// out_j byte i = a_i byte j.
__device__ __forceinline__ void TransposeBytes4x4(unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned& b0,
                                                  unsigned& b1, unsigned& b2, unsigned& b3) {
  const unsigned t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a0, a1, 0x7362);
  const unsigned t2 = __byte_perm(a2, a3, 0x5140), t3 = __byte_perm(a2, a3, 0x7362);
  b0 = __byte_perm(t0, t2, 0x5410);
  b1 = __byte_perm(t0, t2, 0x7632);
  b2 = __byte_perm(t1, t3, 0x5410);
  b3 = __byte_perm(t1, t3, 0x7632);
}

__device__ __forceinline__ unsigned WordOf(const uint4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

// Copies a tile's 64 e4m3 cache rows (576 bytes: 16-byte chunks 0-35) into the stage at shared
// address `tile`: chunk c of row r lands in group c / 8 at chunk (c % 8) ^ (r % 8). The calling warp
// takes rows first, first + kWarps, ... (addresses staged in `addr`, -1 for a masked row:
// zero-filled); lane L copies chunk L, and lanes 0-3 chunk 32 + L too.
template <int kWarps>
__device__ __forceinline__ void GatherFp8TileRows(unsigned tile, int first, int lane, const long long* addr,
                                                  const char* fallback) {
  constexpr unsigned kGroupBytes = WgmmaFp8Smem::kGroupBytes;
  const unsigned dst = tile + (lane >> 3) * kGroupBytes + ((lane & 7) << 4);
#pragma unroll
  for (int batch = 0; batch < 64 / kWarps / 8; ++batch) {
    long long a[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = addr[first + kWarps * (8 * batch + k)];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int row = first + kWarps * (8 * batch + k);
      const bool ok = a[k] >= 0;
      const char* src = (ok ? reinterpret_cast<const char*>(a[k]) : fallback) + lane * 16;
      CpAsync16((dst ^ ((row & 7) << 4)) + row * 128, src, ok);
      if (lane < 4) CpAsync16(tile + 4 * kGroupBytes + row * 128 + ((lane ^ (row & 7)) << 4), src + 512, ok);
    }
  }
}

// Block i (0-127) of the transpose of V in `stage` (its rows' dims 0-511) into vt's bytes
// 64 * parity ... of rows 0-511: tokens 16 tb .. + 15 x dims 16 dc .. + 15 (16 loads of 16 bytes, 16
// 4x4 byte transposes, 16 stores). dc % 8 is i % 8 and tb cycles with it, so that the loads of 8
// consecutive blocks hit 8 different chunks of their rows and their stores 4 (a 2-way conflict).
__device__ __forceinline__ void TransposeTileV(const unsigned char* stage, unsigned char* vt, int parity, int i) {
  constexpr unsigned kGroupBytes = WgmmaFp8Smem::kGroupBytes;
  const int dc_lo = i & 7, dc = 8 * (i >> 5) + dc_lo, tb = (dc_lo + (i >> 3)) & 3;
  const unsigned char* src = stage + (dc >> 3) * kGroupBytes + tb * 16 * 128;
  uint4 in[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) in[k] = *reinterpret_cast<const uint4*>(src + k * 128 + ((dc_lo ^ (k & 7)) << 4));
  unsigned char* dst = vt + dc * 16 * 128;
  const int chunk = 4 * parity + tb;
#pragma unroll
  for (int b = 0; b < 4; ++b) {  // dims 4b .. 4b + 3 of the block
    unsigned w[4][4];            // w[j][a]: dim 4b + j, tokens 4a .. 4a + 3
#pragma unroll
    for (int a = 0; a < 4; ++a)
      TransposeBytes4x4(WordOf(in[4 * a], b), WordOf(in[4 * a + 1], b), WordOf(in[4 * a + 2], b),
                        WordOf(in[4 * a + 3], b), w[0][a], w[1][a], w[2][a], w[3][a]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int d = 4 * b + j;
      *reinterpret_cast<uint4*>(dst + d * 128 + ((chunk ^ (d & 7)) << 4)) = make_uint4(w[j][0], w[j][1], w[j][2], w[j][3]);
    }
  }
}

// Eight bf16 -> their nearest e4m3 values (ties to even, saturating; NaN stays NaN), lowest first.
__device__ __forceinline__ uint2 Bf16x8ToE4m3(uint4 v) {
  auto pair = [](unsigned w) { return static_cast<unsigned>(RoundToE4m3x2(Bf16Lo(w), Bf16Hi(w))); };
  return make_uint2(pair(v.x) | (pair(v.y) << 16), pair(v.z) | (pair(v.w) << 16));
}

template <int kHeads>
__device__ __forceinline__ void WgmmaFp8SplitKernelBody(const MlaVerifyParams& p, int split) {
  constexpr int kTile = 64, kRows = 64, kThreads = 384;
  constexpr int kProducerRegs = TileWgmma64x64::kProducerRegsFp8Mma, kConsumerRegs = TileWgmma64x64::kConsumerRegsFp8Mma;
  constexpr unsigned kGroupBytes = WgmmaFp8Smem::kGroupBytes;
  constexpr unsigned kAtomBytes = 1024;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const unsigned raw_addr = SmemAddr(smem_raw);
  const unsigned pad = ((raw_addr + 1023u) & ~1023u) - raw_addr;
  WgmmaFp8Smem& sm = *reinterpret_cast<WgmmaFp8Smem*>(smem_raw + pad);
  const unsigned q_addr = SmemAddr(sm.q);

  const int m_tile = blockIdx.x, b = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;

  SplitCta cta;
  const bool has_rows = BeginSplitCta<kHeads, kRows, true>(p, b, split, m_tile, tid, kThreads, &cta);
  KJIT_STAMP(kTlRequest);
  if (!has_rows) return;
  const Request rq = cta.rq;
  const int rows_b = cta.rows_b, m0 = cta.m0;
  long long kv_begin = 0, kv_end = 0;
  PrefixChunk<kTile>(rq.prefix, p.num_splits, split, &kv_begin, &kv_end);
  if (kv_begin >= kv_end) {
    const StateRows state = StateOf(p, b, split);
    WriteEmptyState(state.lse, state.o, m0, rows_b, kRows, tid, kThreads);
    return;
  }
  const int num_tiles = static_cast<int>((kv_end - kv_begin + kTile - 1) / kTile);
  const KvRows<kTile> kv_rows(p, rq, false, kv_begin, kv_end, 1);
  constexpr long long kPastEnd = KvRows<kTile>::kPastEnd;
  constexpr int kConsumers = 256, kProducers = 128, kCopiers = 64;  // warpgroups 0-1, 2; warps 8-9 copy
  const int i = tid - kConsumers;  // producer thread 0-127
  // Tiles 0 and 1's slot indices, loaded ahead (split_wgmma.cuh's e4m3 producer does the same).
  long long raw_next = i >= 0 && i < kCopiers ? kv_rows.Raw(p, 0, i) : kPastEnd;
  long long raw_after = i >= 0 && i < kCopiers && num_tiles > 1 ? kv_rows.Raw(p, 1, i) : kPastEnd;

  constexpr int kBarProducer = 3;
  constexpr int kBarConsumers = 4;
  auto full_bar = [&](int t) { return SmemAddr(&sm.full[t & 1]); };
  auto vt_bar = [&](int t) { return SmemAddr(&sm.vt_full[t & 1]); };
  auto empty_bar = [&](int t) { return SmemAddr(&sm.empty[t & 1]); };
  auto p_ready_bar = [&](int t) { return SmemAddr(&sm.p_ready[t & 1]); };
  if (tid == 0) {
    for (int s = 0; s < 2; ++s) {
      MbarInit(SmemAddr(&sm.full[s]), 2 * kCopiers);  // every copying thread's copies and its arrival
      MbarInit(SmemAddr(&sm.vt_full[s]), kProducers - kCopiers);
      MbarInit(SmemAddr(&sm.empty[s]), kConsumers);
      MbarInit(SmemAddr(&sm.p_ready[s]), 128);
    }
  }
  __syncthreads();

  if (wg == 2) {
    // ---- Producer. Warps 8-9 stage tile t's indices and issue its copies once both consumers are
    // done with tile t - 2; warps 10-11 write each landed tile's V^T (vt's half t % 2 was last read
    // by tile t - 2's P.V), two blocks a thread.
    WarpgroupRegsDec<kProducerRegs>();
    const int pw = warp - 8;
    if (pw < 2) {
      const char* kv_base = reinterpret_cast<const char*>(kv_rows.base);
      const long long kv_row_bytes = kv_rows.row_bytes;
      for (int t = 0; t < num_tiles; ++t) {
        const long long raw = raw_next;
        raw_next = raw_after;
        raw_after = t + 2 < num_tiles ? kv_rows.Raw(p, t + 2, i) : kPastEnd;
        const long long v = kv_rows.Validate(p, raw, t, i);
        sm.idx[t % kIdxRing][i] = kv_rows.StagedAddress(v);
        if (raw_next >= 0 && raw_next < p.num_slots) PrefetchL2(kv_base + raw_next * kv_row_bytes, kKDim);
        const unsigned bits = __ballot_sync(0xffffffffu, v >= 0);
        if (lane == 0) sm.valid[t % kIdxRing][i >> 5] = bits;
        NamedBarrier(kBarProducer, kCopiers);
        if (t >= 2) MbarWait(empty_bar(t), ((t >> 1) & 1) ^ 1);  // tile t - 2's phase
        if (KJIT_FP8MMA_EXP != 2) GatherFp8TileRows<2>(SmemAddr(sm.kv[t & 1]), pw, lane, sm.idx[t % kIdxRing], kv_base);
        CpAsyncMbarArrive(full_bar(t));
        MbarArrive(full_bar(t));  // sm.valid of tile t
        if (t == 0) KJIT_STAMP_BY(kTlTile0Issued, kConsumers);
      }
      CpAsyncWait<0>();
    } else {
      for (int t = 0; t < num_tiles; ++t) {
        MbarWait(full_bar(t), (t >> 1) & 1);
#pragma unroll 1
        for (int block = i - kCopiers; block < 128 && KJIT_FP8MMA_EXP != 1; block += kProducers - kCopiers)
          TransposeTileV(sm.kv[t & 1], sm.vt, t & 1, block);
        FenceProxyAsyncShared();
        MbarArrive(vt_bar(t));
      }
    }
    return;
  }

  WarpgroupRegsInc<kConsumerRegs>();
  // ---- Q: loaded by the consumers, rounded to e4m3 and stored in Q's groups (dims 128g .. in group
  // g; chunk c of 16 dims of row r at chunk (c % 8) ^ (r % 8)); rows past the request are zeros.
  {
    constexpr int kItems = kRows * kKDim / 16 / kConsumers;  // 9 chunks of 16 dims a thread
    static_assert(kItems * kConsumers == kRows * kKDim / 16, "Q's chunks divide among the consumers");
    uint4 v[kItems][2];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int item = tid + kConsumers * j, row = item / 36, c = item - 36 * row, rg = m0 + row;
      v[j][0] = v[j][1] = make_uint4(0u, 0u, 0u, 0u);
      if (rg < rows_b) {
        const uint4* src = reinterpret_cast<const uint4*>(p.q + (rq.q0 + rg / kHeads) * p.q_stride_n +
                                                          (rg % kHeads) * p.q_stride_h + 16 * c);
        v[j][0] = __ldg(src);
        v[j][1] = __ldg(src + 1);
      }
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int item = tid + kConsumers * j, row = item / 36, c = item - 36 * row;
      const uint2 lo = Bf16x8ToE4m3(v[j][0]), hi = Bf16x8ToE4m3(v[j][1]);
      *reinterpret_cast<uint4*>(sm.q + (c >> 3) * kGroupBytes + row * 128 + (((c & 7) ^ (row & 7)) << 4)) =
          make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
    FenceProxyAsyncShared();
    NamedBarrier(kBarConsumers, kConsumers);
  }
  KJIT_STAMP(kTlQLanded);

  const int row0 = 16 * wq + (lane >> 2);
  float o[128];
#pragma unroll
  for (int k = 0; k < 128; ++k) o[k] = 0.f;
  float m_run[2] = {NegInf(), NegInf()}, l_own[2] = {0.f, 0.f};
  auto rescale_o = [&](float a0, float a1) { WgmmaRescaleO(o, a0, a1); };
  // P of tile t: the second 64 bytes of its stage's group 4 rows.
  auto p_addr = [&](int t) { return SmemAddr(sm.kv[t & 1]) + 4 * kGroupBytes + 64; };

  // O += P.V of tile t over value columns 256 * wg ..: B = V^T rows 256 wg .., K (tokens) at byte
  // 64 * (t % 2) of each row; two k-steps of 32 tokens, committed as one group.
  auto issue_pv = [&](int t) {
    MbarWait(vt_bar(t), (t >> 1) & 1);
    FenceProxyAsyncShared();
    const unsigned long long pd = Opaque(WgmmaDesc(p_addr(t), 16, kAtomBytes));
    const unsigned long long vd = WgmmaDesc(SmemAddr(sm.vt) + wg * 256 * 128 + 64 * (t & 1), 16, kAtomBytes);
    WgmmaPin(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kTile / 32; ++kk)
      WgmmaM64N256K32E4m3(o, WgmmaDescAdvance(pd, kk * 32), WgmmaDescAdvance(vd, kk * 32), true);
    WgmmaCommit();
  };
  // The same, then waits for it and releases the stage.
  auto pv_and_release = [&](int t) {
    issue_pv(t);
    WgmmaWait<0>();
    WgmmaPin(o);
    MbarArrive(empty_bar(t));
  };

  const float scale = p.prefix_scale_log2;
  float s[32];
  // S = Q.K^T of tile t: 18 k-steps of 32 dims; step ks is group ks / 4, + 32 bytes within it.
  auto issue_qk = [&](int t) {
    const unsigned long long qd = Opaque(WgmmaDesc(q_addr, 16, kAtomBytes));
    const unsigned long long kd = WgmmaDesc(SmemAddr(sm.kv[t & 1]), 16, kAtomBytes);
    MbarWait(full_bar(t), (t >> 1) & 1);
    FenceProxyAsyncShared();
#if KJIT_FP8MMA_PROMOTE > 0
    // Experiment: chains of KJIT_FP8MMA_PROMOTE k-steps, each added to s in fp32 (slow: waits).
    float part[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) s[k] = 0.f;
#pragma unroll
    for (int k0 = 0; k0 < kKDim / 32; k0 += KJIT_FP8MMA_PROMOTE) {
      WgmmaPin(part);
      WgmmaFence();
#pragma unroll
      for (int ks = k0; ks < k0 + KJIT_FP8MMA_PROMOTE && ks < kKDim / 32; ++ks) {
        const unsigned off = (ks >> 2) * kGroupBytes + (ks & 3) * 32;
        WgmmaM64N64K32E4m3(part, WgmmaDescAdvance(qd, off), WgmmaDescAdvance(kd, off), ks > k0);
      }
      WgmmaCommit();
      WgmmaWait<0>();
      WgmmaPin(part);
#pragma unroll
      for (int k = 0; k < 32; ++k) s[k] += part[k];
    }
    WgmmaPin(s);
    WgmmaFence();
    WgmmaCommit();
#else
    WgmmaPin(s);
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kKDim / 32; ++ks) {
      const unsigned off = (ks >> 2) * kGroupBytes + (ks & 3) * 32;
      WgmmaM64N64K32E4m3(s, WgmmaDescAdvance(qd, off), WgmmaDescAdvance(kd, off), ks > 0);
    }
    WgmmaCommit();
#endif
  };

  // Tile t's softmax (this warpgroup owns it; its S has landed): s becomes P, written in e4m3 (columns
  // 8j + 2(lane % 4) .. + 1 of rows row0, row0 + 8: byte 64 + column of the row, swizzled) with alpha
  // and the running max for the other warpgroup, then "P ready".
  auto own_softmax = [&](int t, float (&alpha)[2]) {
    const int par = t & 1;
    WgmmaTileSoftmax(s, [&](int) -> const unsigned* { return sm.valid[t % kIdxRing]; }, scale, lane, m_run, l_own, alpha);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      unsigned char* prow = sm.kv[par] + 4 * kGroupBytes + row * 128 + 2 * (lane & 3);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        *reinterpret_cast<unsigned short*>(prow + (((4 + (j >> 1)) ^ (row & 7)) << 4) + 8 * (j & 1)) =
            RoundToE4m3x2(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]);
      if ((lane & 3) == 0) {
        sm.alpha[par][row] = alpha[h];
        sm.row_max[par][row] = m_run[h];
      }
    }
    FenceProxyAsyncShared();
    MbarArrive(p_ready_bar(t));
  };
  // The other warpgroup's tile t: once its P is ready, its rescale of this half of O and of the row
  // sums, and its running max.
  auto take_other = [&](int t, float (&a)[2]) {
    MbarWait(p_ready_bar(t), (t >> 1) & 1);
    const int par = t & 1;
    a[0] = sm.alpha[par][row0], a[1] = sm.alpha[par][row0 + 8];
    m_run[0] = sm.row_max[par][row0];
    m_run[1] = sm.row_max[par][row0 + 8];
    l_own[0] *= a[0];
    l_own[1] *= a[1];
  };

  if (wg == 1 && num_tiles > 1) issue_qk(1);
  for (int t = 0; t < num_tiles; ++t) {
    if ((t & 1) == wg) {
      if (t != 1) issue_qk(t);
      WgmmaWait<0>();
      WgmmaPin(s);
      if (t == 0) KJIT_STAMP(kTlFirstS);
      float alpha[2];
      own_softmax(t, alpha);
      rescale_o(alpha[0], alpha[1]);
      pv_and_release(t);
    } else {
      float a[2];
      take_other(t, a);
      WgmmaWait<0>();  // warpgroup 1's first Q.K^T (t = 0); nothing otherwise
      WgmmaPin(s);
      rescale_o(a[0], a[1]);
      pv_and_release(t);
    }
  }
  KJIT_STAMP(kTlLoopEnd);
  WgmmaWait<0>();  // nothing is in flight; said here so that ptxas need not insert it
  WgmmaPin(o);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = QuadSum(l_own[h]);
    if ((lane & 3) == 0) sm.row_sums[wg][row0 + 8 * h] = l;
  }
  NamedBarrier(kBarConsumers, kConsumers);  // row sums visible; every wgmma has completed
  WgmmaWriteState(p, b, split, p.v_scale, o, sm.row_sums, m_run, sm.vt, m0, rows_b, wg, wq, lane, tid);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace mla
}  // namespace kjit
