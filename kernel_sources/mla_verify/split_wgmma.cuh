// The split kernel on sm_90a: the same contract as split_kernel.cuh (one CTA = 64 query rows of
// request b x one prefix chunk, or the draft tree for split 0; normalized bf16 partial O and log2-LSE
// into the workspace), computed with warpgroup MMAs that read both operands from shared memory.
//
// Three warpgroups. Warpgroup 2, the producer, copies Q (or, with KJIT_Q_BY_CONSUMERS, the two
// consumer warpgroups do), stages each tile's row source addresses (from slot indices loaded a tile
// ahead and checked) and gathers whole tiles with cp.async into a 2-stage ring, each stage as two
// parts (groups 0-3 and 8, then groups 4-7) whose "full" mbarriers cp.async itself completes; in the
// tree CTA, consumer warpgroup 0 stages each query row's mask bits while Q is in flight. The two consumer warpgroups
// share the work "seesaw" style (FlashMLA's schedule): warpgroup w owns the tiles t with t % 2 == w.
// For its own tile the owner computes S = Q.K^T (36 wgmma m64n64k16, Q and K from shared memory)
// and the online softmax against the running max the other warpgroup published for tile t-1, writes
// P (bf16) into the tile's rope group (read only by Q.K^T, so free by then), the rows' rescale
// factors and the new running max, and signals "P ready". Both warpgroups then add P.V into their own
// half of O (64 x 256 fp32 in registers: warpgroup 0 value columns 0-255, warpgroup 1 256-511) and
// release the stage ("empty") when their P.V is done. So one warpgroup's softmax runs while the
// other's Q.K^T and both P.V's keep the tensor cores busy, and the critical path per tile is about
// one P.V + one Q.K^T + one softmax instead of the whole tile's work in one warpgroup. The
// consumers take registers from the producer (setmaxnreg).
//
// Shared-memory tiles are 128-byte-swizzled "groups" of 64 rows x 64 bf16 (wgmma.cuh): Q and each
// KV stage hold 9 groups (dims 0-63, ..., 512-575) of 8 KB.
//
// An fp8 e4m3 cache (kFp8): the 227 KB hold no staging ring beside the bf16 stages, so a prefix
// CTA's producer loads a whole tile's bytes into registers (Fp8TileRows: 72 registers a thread,
// hence the fp8 register split of TileWgmma64x64), converts them exactly to bf16 and stores them
// where cp.async would have put them. The next tile's loads go out right after a tile's stores,
// before its stage is free, and the L2 prefetch of the tile after (one bulk prefetch per row, issued
// with its indices) keeps DRAM busy beyond what the registers hold. With fp8 numerics (MlaVerifyParams::flags' kFp8RoundBit)
// the consumers round Q to e4m3 in place once it has landed, and P is rounded to e4m3 before P.V.
// The tree CTA (k_extend, bf16) runs as with a bf16 cache.
#pragma once

#include "common/bf16.cuh"
#include "common/cp_async.cuh"
#include "common/fp8.cuh"

// KJIT_FP8_PRODUCER (experiments only, kernel_bench --define; 0 in production): 2 = the e4m3
// producer loads nothing (stores made-up rows), 3 = it stores nothing (its loads and conversions
// kept alive by a sink); both wrong values, to split its cost
// (bench/results/kernel_bench-2026-12-04-h200-fp8-producer.md).
#ifndef KJIT_FP8_PRODUCER
#define KJIT_FP8_PRODUCER 0
#endif
// KJIT_Q_BY_CONSUMERS (experiments only, kernel_bench --define; 0 in production): 1 = the two
// consumer warpgroups copy Q (eight warps; the producer's four then start on the first KV tile at
// once); 0 = the producer copies Q, then the tile. 1 passes the GPU tests and gained nothing in a
// graph replay (bench/results/kernel_bench-2026-12-07-h100-q-source.md).
#ifndef KJIT_Q_BY_CONSUMERS
#define KJIT_Q_BY_CONSUMERS 0
#endif
// KJIT_Q_SOURCE (experiments only, kernel_bench --define; 0 in production): 1 = each split CTA
// copies its "Q" from cache rows of its own instead of the request's Q (wrong values).
#ifndef KJIT_Q_SOURCE
#define KJIT_Q_SOURCE 0
#endif
#include "common/mbarrier.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "common/sync.cuh"
#include "common/wgmma.cuh"
#include "mla_verify/mask.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"
#include "mla_verify/timeline.cuh"
#include "mla_verify/traits.h"
#include "mla_verify/wgmma_consumer.cuh"

namespace kjit {
namespace mla {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Copies the 64 rows of a 9-group tile at shared address `tile` (1024-aligned) with the 16-byte
// cp.async of one warp per row: the calling warp takes rows first, first + step, ...; lane copies
// chunks lane, lane + 32, lane + 64 (< 72) of the 1152-byte row, and chunk c lands in group c / 8 at
// chunk (c % 8) ^ (row % 8). row_src(row, &ok) is the row's first byte, read only when ok. (Q.)
template <class RowSrc>
__device__ __forceinline__ void CopyTileRows(unsigned tile, int first, int step, int lane, RowSrc&& row_src) {
  constexpr unsigned kGroupBytes = WgmmaSmem::kGroupBytes;
  const unsigned dst = tile + (lane >> 3) * kGroupBytes + ((lane & 7) << 4);
#pragma unroll 4
  for (int row = first; row < 64; row += step) {
    bool ok;
    const char* src = row_src(row, &ok) + lane * 16;
    const unsigned d = (dst ^ ((row & 7) << 4)) + row * 128;
    CpAsync16(d, src, ok);
    CpAsync16(d + 4 * kGroupBytes, src + 512, ok);
    if (lane < 8) CpAsync16(d + 8 * kGroupBytes, src + 1024, ok);  // chunks 64..71
  }
}

// The two parts of a KV stage: A = chunks 0-31 and 64-71 (groups 0-3 and 8), B = chunks 32-63
// (groups 4-7).
enum TilePart { kPartA, kPartB };

// CopyTileRows for one part of a KV tile whose row source addresses are staged in shared memory
// (`addr`, -1 for a masked row, which is zero-filled from `fallback`): the calling warp takes rows
// first, first + 4, ... (16 rows) and loads eight addresses at a time before issuing their copies,
// so no copy waits for its own address load.
template <TilePart kPart>
__device__ __forceinline__ void GatherTileRows(unsigned tile, int first, int lane, const long long* addr, const char* fallback) {
  constexpr unsigned kGroupBytes = WgmmaSmem::kGroupBytes;
  const unsigned dst = tile + (lane >> 3) * kGroupBytes + ((lane & 7) << 4);
#pragma unroll
  for (int batch = 0; batch < 2; ++batch) {
    long long a[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = addr[first + 32 * batch + 4 * k];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int row = first + 32 * batch + 4 * k;
      const bool ok = a[k] >= 0;
      const char* src = (ok ? reinterpret_cast<const char*>(a[k]) : fallback) + lane * 16;
      const unsigned d = (dst ^ ((row & 7) << 4)) + row * 128;
      if (kPart == kPartA) {
        CpAsync16(d, src, ok);
        if (lane < 8) CpAsync16(d + 8 * kGroupBytes, src + 1024, ok);  // chunks 64..71
      } else {
        CpAsync16(d + 4 * kGroupBytes, src + 512, ok);
      }
    }
  }
}

// An e4m3 cache's tile rows, held in the producer's registers between their loads and their stores:
// warp pw's 16 rows pw, pw + 4, ..., each 16-byte bf16 chunk c made from e4m3 bytes 8c..8c+7. Chunks
// 0-31 (part A) and 32-63 (part B) take 8 bytes a lane per row; the rope chunks 64-71 (part A, 64
// bytes a row) take lanes 8j..8j+7 for rows 4j' + j of the warp's 16. A masked row is zeros.
struct Fp8TileRows {
  static constexpr int kRows = 16;
  uint2 a[kRows], b[kRows], rope[kRows / 4];

  // Loads only: the stage need not be free yet (its previous tile may still be read).
  __device__ __forceinline__ void Load(const long long* addr, int first, int lane) {
    const uint2 zero = make_uint2(0u, 0u);
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const long long r = addr[first + 4 * k];
      const char* src = reinterpret_cast<const char*>(r) + lane * 8;
#if KJIT_FP8_PRODUCER == 2
      a[k] = b[k] = make_uint2(lane * (k + 1), lane);
#else
      a[k] = r >= 0 ? __ldg(reinterpret_cast<const uint2*>(src)) : zero;
      b[k] = r >= 0 ? __ldg(reinterpret_cast<const uint2*>(src + 256)) : zero;
#endif
    }
#pragma unroll
    for (int j = 0; j < kRows / 4; ++j) {
      const long long r = addr[first + 4 * (4 * j + (lane >> 3))];
      const char* src = reinterpret_cast<const char*>(r) + 512 + (lane & 7) * 8;
#if KJIT_FP8_PRODUCER == 2
      rope[j] = make_uint2(lane * (j + 3), lane);
#else
      rope[j] = r >= 0 ? __ldg(reinterpret_cast<const uint2*>(src)) : zero;
#endif
    }
  }

  // Converts and stores one part where GatherTileRows' cp.async would have put it.
  template <TilePart kPart>
  __device__ __forceinline__ void Store(unsigned tile, int first, int lane) const {
    constexpr unsigned kGroupBytes = WgmmaSmem::kGroupBytes;
    const unsigned dst = tile + ((kPart == kPartA ? 0 : 4) + (lane >> 3)) * kGroupBytes + ((lane & 7) << 4);
#if KJIT_FP8_PRODUCER == 3
    unsigned sink = 0;
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const uint4 v = E4m3x8ToBf16(kPart == kPartA ? a[k] : b[k]);
      sink ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (kPart == kPartA) {
#pragma unroll
      for (int j = 0; j < kRows / 4; ++j) {
        const uint4 v = E4m3x8ToBf16(rope[j]);
        sink ^= v.x ^ v.y ^ v.z ^ v.w;
      }
    }
    if (sink == 0x9e3779b9u) StShared16(dst, make_uint4(sink, 0u, 0u, 0u));
#else
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int row = first + 4 * k;
      StShared16((dst ^ ((row & 7) << 4)) + row * 128, E4m3x8ToBf16(kPart == kPartA ? a[k] : b[k]));
    }
    if (kPart == kPartA) {
#pragma unroll
      for (int j = 0; j < kRows / 4; ++j) {
        const int row = first + 4 * (4 * j + (lane >> 3));
        StShared16(tile + 8 * kGroupBytes + row * 128 + (((lane & 7) ^ (row & 7)) << 4), E4m3x8ToBf16(rope[j]));
      }
    }
#endif
  }
};

// The tree mask of draft tile t as bits, one word per query row and 32 KV columns (bit c % 32 of
// word c / 32: may the row's token attend draft column 64t + c), for the consumers' softmax. Warp
// pw takes rows 16pw..16pw+15, which belong to at most 16 / kHeads tokens (rows are token * kHeads
// + head), so each lane loads the mask of a few (token, column) pairs, all issued before any is
// used. Rows past the request have no token: Allowed says no.
template <int kHeads, bool kPacked>
__device__ __forceinline__ void StageTreeBits(const TreeMask<kPacked>& mask, const MlaVerifyParams& p, int draft,
                                              int m0, int pw, int lane, int t, unsigned (*bits)[2]) {
  constexpr int kTokens = kHeads >= 16 ? 1 : 16 / kHeads;
  const int tok0 = (m0 + 16 * pw) / kHeads;
  unsigned w[kTokens][2];
#pragma unroll
  for (int k = 0; k < kTokens; ++k) {
#pragma unroll
    for (int h = 0; h < 2; ++h) w[k][h] = __ballot_sync(0xffffffffu, mask.Allowed(p, tok0 + k, 64 * t + 32 * h + lane, draft));
  }
  if (lane < 16) {
    const int row = 16 * pw + lane;
    const int k = (m0 + row) / kHeads - tok0;
    unsigned w0 = w[0][0], w1 = w[0][1];
#pragma unroll
    for (int kk = 1; kk < kTokens; ++kk) {
      if (k == kk) w0 = w[kk][0], w1 = w[kk][1];
    }
    bits[row][0] = w0;
    bits[row][1] = w1;
  }
}

template <int kHeads, bool kPackedMask, bool kFp8 = false>
__device__ __forceinline__ void WgmmaSplitKernelBody(const MlaVerifyParams& p) {
  using Cfg = TileWgmma64x64;
  constexpr int kTile = Cfg::kKvTile;                 // 64
  constexpr int kRows = Cfg::kRows;                   // 64
  constexpr int kThreads = Cfg::kThreads;             // 384
  constexpr int kProducerRegs = kFp8 ? Cfg::kProducerRegsFp8 : Cfg::kProducerRegs;
  constexpr int kConsumerRegs = kFp8 ? Cfg::kConsumerRegsFp8 : Cfg::kConsumerRegs;
  constexpr unsigned kGroupBytes = WgmmaSmem::kGroupBytes;  // 64 rows x 128 bytes
  constexpr unsigned kAtomBytes = 1024;               // 8 rows x 128 bytes
  static_assert(kTile == 64 && kRows == 64, "one 64 x 64 S tile per warpgroup MMA chain");

  // The plan requests sizeof(WgmmaSmem) + 1024 bytes: the swizzle atoms need 1024-byte alignment,
  // found here (declaring it would pad the CTA's static shared memory to 1024 bytes instead).
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const unsigned raw_addr = SmemAddr(smem_raw);
  const unsigned pad = ((raw_addr + 1023u) & ~1023u) - raw_addr;
  WgmmaSmem& sm = *reinterpret_cast<WgmmaSmem*>(smem_raw + pad);
  const unsigned q_addr = SmemAddr(sm.q);

  const int m_tile = blockIdx.x, split = SplitOfCta(), b = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // The warpgroup index through a shuffle: provably uniform across the warp, so ptxas keeps the
  // wgmma of each warpgroup's branch asynchronous.
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;

  SplitCta cta;
  const bool has_rows = BeginSplitCta<kHeads, kRows, true>(p, b, split, m_tile, tid, kThreads, &cta);
  KJIT_STAMP(kTlRequest);
  if (!has_rows) return;
  const Request rq = cta.rq;
  const int rows_b = cta.rows_b, m0 = cta.m0;
  const bool tree = split == 0;
  long long kv_begin = 0, kv_end = rq.draft;
  if (!tree) PrefixChunk<kTile>(rq.prefix, p.num_splits, split, &kv_begin, &kv_end);

  if (kv_begin >= kv_end) {
    const StateRows state = StateOf(p, b, split);
    WriteEmptyState(state.lse, state.o, m0, rows_b, kRows, tid, kThreads);
    return;
  }
  const int num_tiles = static_cast<int>((kv_end - kv_begin + kTile - 1) / kTile);

  const KvRows<kTile> kv_rows(p, rq, tree, kv_begin, kv_end, kFp8 ? 1 : 2);
  constexpr long long kPastEnd = KvRows<kTile>::kPastEnd;
  const bool fp8_rows = kFp8 && !tree;                // this CTA reads e4m3 cache rows
  const bool round_p = fp8_rows && (p.flags & kFp8RoundBit) != 0;  // fp8 numerics: P (and Q) rounded to e4m3
  // The producer's first slot indices, loaded here, ahead of Q's copies: the load is on the path to
  // the first tile, and issued after those copies it waited behind them.
  constexpr int kConsumers = 256, kProducers = 128;  // warpgroups 0-1 and 2
  const int i = tid - kConsumers;                    // producer thread 0-127
  long long raw_next = i >= 0 && i < kTile ? kv_rows.Raw(p, 0, i) : kPastEnd;
  // With e4m3 rows, also tile t + 2's (loaded at step t), so that step t can prefetch tile t + 1's
  // rows into L2 without waiting for a load.
  long long raw_after = fp8_rows && i >= 0 && i < kTile && num_tiles > 1 ? kv_rows.Raw(p, 1, i) : kPastEnd;

  // Q's row `row` of this CTA (its first byte), read only when *ok: the request's rows m0 ... .
  auto q_row = [&](int row, bool* ok) {
    const int rg = m0 + row;
    *ok = rg < rows_b;
#if KJIT_Q_SOURCE == 1
    // Experiment (wrong values, times only): each CTA's "Q" from cache rows of its own, to tell
    // the cost of every split CTA of a row tile reading the same Q lines at once.
    const long long slot = (static_cast<long long>(split) * kRows + row + 4096LL * m_tile) % p.num_slots;
    return reinterpret_cast<const char*>(p.kv_cache) + slot * kKDim * 2;
#endif
    const long long tok = *ok ? rg / kHeads : 0;
    return reinterpret_cast<const char*>(p.q + (rq.q0 + tok) * p.q_stride_n + (rg % kHeads) * p.q_stride_h);
  };
  // Barriers. Named: the producer's own warps (tile t's indices staged); the consumers' epilogue.
  // mbarriers: Q landed; per stage s and part h "full" (the part landed; for part A also the
  // indices' valid bits are visible); per stage "empty" (both
  // consumer warpgroups are done with it); per tile parity "P ready" (the owner wrote the tile's P,
  // alpha and running max).
  constexpr int kBarProducer = 3;
  constexpr int kBarConsumers = 4;  // warpgroups 0 and 1: row sums written, every wgmma complete
  const unsigned bar_q = SmemAddr(&sm.bar_q);
  auto full_bar = [&](int t, int h) { return SmemAddr(&sm.full[t & 1][h]); };
  auto empty_bar = [&](int t) { return SmemAddr(&sm.empty[t & 1]); };
  auto p_ready_bar = [&](int t) { return SmemAddr(&sm.p_ready[t & 1]); };
  if (tid == 0) {
    MbarInit(bar_q, KJIT_Q_BY_CONSUMERS ? kConsumers : kProducers);
    for (int s = 0; s < 2; ++s) {
      // Part A: every producer thread's copies and its plain arrival (the valid bits), or with e4m3
      // rows the plain arrival after its stores; part B: the copies (or that arrival).
      MbarInit(SmemAddr(&sm.full[s][0]), fp8_rows ? kProducers : 2 * kProducers);
      MbarInit(SmemAddr(&sm.full[s][1]), kProducers);
      MbarInit(SmemAddr(&sm.empty[s]), kConsumers);
      MbarInit(SmemAddr(&sm.p_ready[s]), 128);  // the owner warpgroup's threads
    }
  }
  __syncthreads();

  if (wg == 2) {
    // ---- Producer: per tile t the indices (loaded one tile ahead) and the tile, part A first
    // (Q.K^T starts on it), once both consumers are done with tile t - 2 (and Q first where
    // KJIT_Q_BY_CONSUMERS is 0).
    WarpgroupRegsDec<kProducerRegs>();
    const int pw = warp - 8;  // producer warp 0-3
#if !KJIT_Q_BY_CONSUMERS
    CopyTileRows(q_addr, pw, 4, lane, q_row);
    CpAsyncMbarArrive(bar_q);
#endif
    const char* kv_base = reinterpret_cast<const char*>(kv_rows.base);
    const long long kv_row_bytes = kv_rows.row_bytes;
    // Tile t's row source addresses (-1: masked), by warps 8 and 9 whole, from the slot indices
    // loaded a tile ahead; with e4m3 rows also the L2 prefetch of tile t + 1's rows.
    auto stage_indices = [&](int t) {
      if (i >= kTile) return;
      const long long raw = raw_next;
      if (fp8_rows) {
        raw_next = raw_after;
        raw_after = t + 2 < num_tiles ? kv_rows.Raw(p, t + 2, i) : kPastEnd;
      } else {
        raw_next = t + 1 < num_tiles ? kv_rows.Raw(p, t + 1, i) : kPastEnd;
      }
      const long long v = kv_rows.Validate(p, raw, t, i);
      sm.idx[t % kIdxRing][i] = kv_rows.StagedAddress(v);
      if (fp8_rows && raw_next >= 0 && raw_next < p.num_slots) PrefetchL2(kv_base + raw_next * kv_row_bytes, kKDim);
      if (!tree) {  // the tree CTA's softmax reads its mask bits instead
        const unsigned bits = __ballot_sync(0xffffffffu, v >= 0);
        if (lane == 0) sm.valid[t % kIdxRing][i >> 5] = bits;
      }
    };
    if constexpr (kFp8) {
      if (fp8_rows) {
        // e4m3 rows: tile t + 1's loads go out as soon as tile t is stored, before its stage is
        // free, so that their latency hides behind the consumers' work on tiles t - 1 and t; the
        // stores (plain, made visible to the consumers' wgmma here) wait for the stage.
        Fp8TileRows rows;
        stage_indices(0);
        NamedBarrier(kBarProducer, kProducers);
        rows.Load(sm.idx[0], pw, lane);
        for (int t = 0; t < num_tiles; ++t) {
          if (t >= 2) MbarWait(empty_bar(t), ((t >> 1) & 1) ^ 1);  // tile t - 2's phase
          const unsigned stage = SmemAddr(sm.kv[t & 1]);
          rows.Store<kPartA>(stage, pw, lane);
          FenceProxyAsyncShared();
          MbarArrive(full_bar(t, 0));  // also publishes sm.valid of tile t
          rows.Store<kPartB>(stage, pw, lane);
          FenceProxyAsyncShared();
          MbarArrive(full_bar(t, 1));
          if (t == 0) KJIT_STAMP_BY(kTlTile0Issued, kConsumers);
          if (t + 1 < num_tiles) {
            stage_indices(t + 1);  // its slot held tile t - 2's, released by both consumers
            NamedBarrier(kBarProducer, kProducers);
            rows.Load(sm.idx[(t + 1) % kIdxRing], pw, lane);
          }
        }
        return;
      }
    }
    for (int t = 0; t < num_tiles; ++t) {
      stage_indices(t);
      NamedBarrier(kBarProducer, kProducers);
      if (t >= 2) MbarWait(empty_bar(t), ((t >> 1) & 1) ^ 1);  // tile t - 2's phase
      const unsigned stage = SmemAddr(sm.kv[t & 1]);
      GatherTileRows<kPartA>(stage, pw, lane, sm.idx[t % kIdxRing], kv_base);
      CpAsyncMbarArrive(full_bar(t, 0));
      MbarArrive(full_bar(t, 0));  // sm.valid of tile t (the tree CTA's consumers stage its mask bits)
      GatherTileRows<kPartB>(stage, pw, lane, sm.idx[t % kIdxRing], kv_base);
      CpAsyncMbarArrive(full_bar(t, 1));
      if (t == 0) KJIT_STAMP_BY(kTlTile0Issued, kConsumers);
    }
    CpAsyncWait<0>();  // every copy has landed by now (the consumers waited for them); for the tools
    return;
  }

  WarpgroupRegsInc<kConsumerRegs>();
#if KJIT_Q_BY_CONSUMERS
  CopyTileRows(q_addr, warp, 8, lane, q_row);  // warps 0-7, eight rows each
  CpAsyncMbarArrive(bar_q);
#endif
  // The tree CTA's one tile (D <= 64) of mask bits, staged by warpgroup 0 while Q and the tile are
  // in flight, so that the mask's loads are off the path to the first S (the producer staging them
  // after its copies made the tree CTA the last of a short-prefix launch).
  if (tree) {
    if (wg == 0) {
      TreeMask<kPackedMask> mask;
      mask.Init(p, b, rq);
      if (!mask.ok && tid == 0) RaiseError(kErrBadIndptr);
      StageTreeBits<kHeads>(mask, p, rq.draft, m0, wq, lane, 0, sm.tree_bits);
    }
    NamedBarrier(kBarConsumers, kConsumers);  // sm.tree_bits visible to both consumer warpgroups
  }
  // This thread's accumulator rows (both warpgroups use the same rows; O columns differ).
  const int row0 = 16 * wq + (lane >> 2);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  // The running max of this thread's two rows (the same in both warpgroups after each tile) and the
  // part of their row sums from this warpgroup's own tiles, both relative to it.
  float m_run[2] = {NegInf(), NegInf()}, l_own[2] = {0.f, 0.f};
  auto rescale_o = [&](float a0, float a1) { WgmmaRescaleO(o, a0, a1); };
  // Waits for part h of tile t. cp.async writes through the generic proxy, so the consumer's fence
  // then orders its wgmma reads after them.
  auto wait_full = [&](int t, int h) {
    MbarWait(full_bar(t, h), (t >> 1) & 1);
    FenceProxyAsyncShared();
  };
  // P of tile t: the rope group of its stage.
  auto p_group = [&](int t) { return SmemAddr(sm.kv[t & 1]) + 8 * kGroupBytes; };

  // O += P.V of tile t over value columns 256 * wg ...: V is N-major (KV rows = K) in groups
  // 4wg..4wg+3. Then waits for it and releases the stage.
  auto pv_and_release = [&](int t) {
    const unsigned long long pd = Opaque(WgmmaDesc(p_group(t), 16, kAtomBytes));
    const unsigned long long vd = WgmmaDesc(SmemAddr(sm.kv[t & 1]) + 4 * wg * kGroupBytes, kGroupBytes, kAtomBytes);
    WgmmaPin(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      WgmmaM64N256K16Nt(o, WgmmaDescAdvance(pd, kk * 32), WgmmaDescAdvance(vd, kk * 2 * kAtomBytes), true);
    }
    WgmmaCommit();
    WgmmaWait<0>();
    WgmmaPin(o);
    MbarArrive(empty_bar(t));
  };

  const float scale = tree ? p.tree_scale_log2 : p.prefix_scale_log2;
  float s[32];
  // S = Q.K^T of tile t: 36 k-steps of 16 dims; step ks is group ks / 4, +32 bytes within it. Part
  // A's 20 steps (groups 0-3 and 8) go out as soon as it has landed, part B's 16 when it has.
  auto issue_qk = [&](int t) {
    const unsigned long long qd = Opaque(WgmmaDesc(q_addr, 16, kAtomBytes));
    const unsigned long long kd = WgmmaDesc(SmemAddr(sm.kv[t & 1]), 16, kAtomBytes);
    wait_full(t, 0);
    WgmmaPin(s);
    WgmmaFence();
#pragma unroll
    for (int n = 0; n < kKDim / 16; ++n) {
      if (n == 20) wait_full(t, 1);
      const int ks = n < 16 ? n : n < 20 ? n + 16 : n - 4;  // 0-15, 32-35, then 16-31
      const unsigned off = (ks >> 2) * kGroupBytes + (ks & 3) * 32;
      WgmmaM64N64K16(s, WgmmaDescAdvance(qd, off), WgmmaDescAdvance(kd, off), n > 0);
    }
    WgmmaCommit();
  };

  MbarWait(bar_q, 0);
  FenceProxyAsyncShared();
  if (round_p) {  // fp8 numerics: Q to e4m3 in place (elementwise, so in storage order), then visible
    uint4* q4 = reinterpret_cast<uint4*>(sm.q);
    for (int j = tid; j < 9 * 64 * 8; j += kConsumers) q4[j] = RoundBf16x8ToE4m3(q4[j]);
    FenceProxyAsyncShared();
    NamedBarrier(kBarConsumers, kConsumers);
  }
  KJIT_STAMP(kTlQLanded);
  if (wg == 1 && num_tiles > 1) issue_qk(1);  // overlaps warpgroup 0's first tile
  for (int t = 0; t < num_tiles; ++t) {
    const int par = t & 1;
    if (par == wg) {
      // ---- Own tile: Q.K^T (issued here, not at the end of the previous step, so that no
      // wgmma is in flight across a step: ptxas would serialize them all, CatalogTest checks),
      // scale and mask; online softmax (LazyMaxUpdate) from the running max after tile t-1: s
      // becomes P in fp32.
      if (t != 1) issue_qk(t);
      WgmmaWait<0>();
      WgmmaPin(s);
      if (t == 0) KJIT_STAMP(kTlFirstS);
      float alpha[2];
      // Which KV columns the row may attend: the tile's valid rows, or in the tree CTA the row's
      // mask bits (which include the validity of the draft rows).
      WgmmaTileSoftmax(s, [&](int h) -> const unsigned* { return tree ? sm.tree_bits[row0 + 8 * h] : sm.valid[t % kIdxRing]; },
                       scale, lane, m_run, l_own, alpha);
      // ---- P into the rope group (Q.K^T of tile t is complete), alpha and the running max, for
      // the other warpgroup (the previous users of these slots, tile t-2, were released by both).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        unsigned char* prow = reinterpret_cast<unsigned char*>(sm.kv[par]) + 8 * kGroupBytes + row * 128 + (lane & 3) * 4;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          *reinterpret_cast<unsigned*>(prow + ((j ^ (row & 7)) << 4)) =
              round_p ? RoundToE4m3PairBf16x2(s[4 * j + 2 * h], s[4 * j + 2 * h + 1])
                      : PackBf16x2(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]);
        if ((lane & 3) == 0) {
          sm.alpha[par][row] = alpha[h];
          sm.row_max[par][row] = m_run[h];
        }
      }
      FenceProxyAsyncShared();  // P, for the wgmma reads of both warpgroups
      MbarArrive(p_ready_bar(t));
      rescale_o(alpha[0], alpha[1]);
      pv_and_release(t);
    } else {
      // ---- The other warpgroup's tile: its P.V into this half of O.
      MbarWait(p_ready_bar(t), (t >> 1) & 1);
      WgmmaWait<0>();  // warpgroup 1's first Q.K^T (t = 0); nothing otherwise
      WgmmaPin(s);
      const float a0 = sm.alpha[par][row0], a1 = sm.alpha[par][row0 + 8];
      m_run[0] = sm.row_max[par][row0];
      m_run[1] = sm.row_max[par][row0 + 8];
      l_own[0] *= a0;
      l_own[1] *= a1;
      rescale_o(a0, a1);
      pv_and_release(t);
    }
  }
  KJIT_STAMP(kTlLoopEnd);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = QuadSum(l_own[h]);
    if ((lane & 3) == 0) sm.row_sums[wg][row0 + 8 * h] = l;
  }
  NamedBarrier(kBarConsumers, kConsumers);  // row sums visible; every wgmma has completed

  WgmmaWriteState(p, b, split, tree ? 1.f : p.v_scale, o, sm.row_sums, m_run, reinterpret_cast<unsigned char*>(sm.kv[0]),
                  m0, rows_b, wg, wq, lane, tid);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace mla
}  // namespace kjit
