// The split kernel on sm_90a: the same contract as split_kernel.cuh (one CTA = 64 query rows of
// request b x one prefix chunk, or the draft tree for split 0; normalized bf16 partial O and log2-LSE
// into the workspace), computed with warpgroup MMAs that read both operands from shared memory.
//
// Three warpgroups with their own jobs:
// - warpgroup 0 computes S = Q.K^T for the whole 64 x 64 tile (36 wgmma m64n64k16, Q and K straight
//   from shared memory), runs the online softmax with every column of its rows in its own registers
//   (quad shuffles only), writes P (bf16) and each row's rescale factor, then adds P.V into O's first
//   256 columns. When the next tile has landed by then, its Q.K^T goes out right behind the P.V (the
//   tensor cores go from one to the other); when not, the P.V is finished first and its half of the
//   stage released, so the next gather into it does not wait for the late tile.
// - warpgroup 1 adds P.V into O's last 256 columns. It is the last reader of each stage's high half
//   (dims 256-575: Q.K^T of the tile is done before the softmax), so right after its P.V of tile t
//   it gathers tile t + 2's high half into the same place itself, with no hand-over.
// - warpgroup 2, the producer, stages each tile's slot indices (loaded a tile ahead) and gathers the
//   low halves (dims 0-255) with cp.async, each as soon as warpgroup 0 releases it ("empty").
// Tiles live in a 2-stage ring; every half has a "full" mbarrier that cp.async itself completes
// (`cp.async.mbarrier.arrive`), so no thread waits for its own copies.
// The consumers hold their half of O (64 x 256 fp32, 128 registers per thread) and take registers
// from the producer (setmaxnreg). Against the two-warpgroup kernel this replaced (warpgroup 1
// gathered both halves and waited for tile t+1 to land before its P.V of tile t, so each tile's load
// sat on the critical path), KERNEL.md's K2-K7 take 9-19% less time
// (bench/results/kernel_bench-2026-11-29-h200-producer.md).
//
// Shared-memory tiles are 128-byte-swizzled "groups" of 64 rows x 64 bf16 (wgmma.cuh): Q and each
// KV stage hold 9 groups (dims 0-63, ..., 512-575) of 8 KB; P is one group (64 rows x 64 KV rows).
#pragma once

#include "common/bf16.cuh"
#include "common/cp_async.cuh"
#include "common/mbarrier.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "common/sync.cuh"
#include "common/wgmma.cuh"
#include "mla_verify/mask.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"
#include "mla_verify/traits.h"

namespace kjit {
namespace mla {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Which 16-byte chunks of each 1152-byte row CopyTileRows copies: all 72, or one half of a KV stage
// (chunks 0-31 = groups 0-3; chunks 32-71 = groups 4-8).
enum TileRowPart { kWholeRows, kLowHalf, kHighHalf };

// Copies the 64 rows of a 9-group tile at shared address `tile` (1024-aligned) with the 16-byte
// cp.async of one warp per row: the calling warp takes rows first, first + step, ...; lane copies
// chunks lane, lane + 32, lane + 64 (< 72) of the 1152-byte row (those of kPart), and chunk c lands
// in group c / 8 at chunk (c % 8) ^ (row % 8). row_src(row, &ok) is the row's first byte, read only
// when ok.
template <TileRowPart kPart, class RowSrc>
__device__ __forceinline__ void CopyTileRows(unsigned tile, int first, int step, int lane, RowSrc&& row_src) {
  constexpr unsigned kGroupBytes = WgmmaSmem::kGroupBytes;
  const unsigned dst = tile + (lane >> 3) * kGroupBytes + ((lane & 7) << 4);
#pragma unroll 4
  for (int row = first; row < 64; row += step) {
    bool ok;
    const char* src = row_src(row, &ok) + lane * 16;
    const unsigned d = (dst ^ ((row & 7) << 4)) + row * 128;
    if (kPart != kHighHalf) CpAsync16(d, src, ok);
    if (kPart != kLowHalf) {
      CpAsync16(d + 4 * kGroupBytes, src + 512, ok);
      if (lane < 8) CpAsync16(d + 8 * kGroupBytes, src + 1024, ok);  // chunks 64..71
    }
  }
}

template <int kHeads, bool kPackedMask>
__device__ __forceinline__ void WgmmaSplitKernelBody(const MlaVerifyParams& p) {
  using Cfg = ConfigWgmma;
  constexpr int kTile = Cfg::kKvTile;                 // 64
  constexpr int kRows = Cfg::kRows;                   // 64
  constexpr int kThreads = Cfg::kThreads;             // 384
  constexpr int kProducerRegs = Cfg::kProducerRegs, kConsumerRegs = Cfg::kConsumerRegs;
  constexpr unsigned kGroupBytes = WgmmaSmem::kGroupBytes;  // 64 rows x 128 bytes
  constexpr unsigned kAtomBytes = 1024;               // 8 rows x 128 bytes
  static_assert(kTile == 64 && kRows == 64, "one 64 x 64 S tile per warpgroup MMA chain");

  // The plan requests sizeof(WgmmaSmem) + 1024 bytes: the swizzle atoms need 1024-byte alignment,
  // found here (declaring it would pad the CTA's static shared memory to 1024 bytes instead).
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const unsigned raw_addr = SmemAddr(smem_raw);
  const unsigned pad = ((raw_addr + 1023u) & ~1023u) - raw_addr;
  WgmmaSmem& sm = *reinterpret_cast<WgmmaSmem*>(smem_raw + pad);
  const unsigned q_addr = SmemAddr(sm.q), p_addr = SmemAddr(sm.p);

  const int m_tile = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // The warpgroup index through a shuffle: provably uniform across the warp, so ptxas keeps the
  // wgmma of each warpgroup's branch asynchronous.
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3;

  const Request rq = LoadRequest(p, b);
  if (!rq.ok) {
    if (tid == 0 && split == 0 && m_tile == 0) RaiseError(kErrBadIndptr);
    return;
  }
  const int rows_b = rq.draft * kHeads;
  const int m0 = m_tile * kRows;
  if (m0 >= rows_b) return;
  const bool tree = split == 0;
  long long kv_begin = 0, kv_end = rq.draft;
  if (!tree) PrefixChunk<kTile>(rq.prefix, p.num_splits, split, &kv_begin, &kv_end);

  const long long state = static_cast<long long>(b) * (p.num_splits + 1) + split;
  float* part_lse = p.part_lse + state * p.rows_cap;
  unsigned short* part_o = p.part_o + state * p.rows_cap * kVDim;
  if (kv_begin >= kv_end) {
    WriteEmptyState(part_lse, part_o, m0, rows_b, kRows, tid, kThreads);
    return;
  }
  const int num_tiles = static_cast<int>((kv_end - kv_begin + kTile - 1) / kTile);

  TreeMask<kPackedMask> mask;
  if (tree) {
    mask.Init(p, b, rq);
    if (!mask.ok && tid == 0) RaiseError(kErrBadIndptr);
  }

  const KvRows<kTile> kv_rows(p, rq, tree, kv_begin, kv_end);
  constexpr long long kPastEnd = KvRows<kTile>::kPastEnd;
  // Source row of KV row `row` of tile t (its indices staged): ok = false for a masked row.
  auto tile_row_src = [&](int t) {
    const long long* idx = sm.idx[t % kIdxRing];
    const char* base = reinterpret_cast<const char*>(kv_rows.base);
    return [idx, base, &kv_rows](int row, bool* ok) {
      const long long s = idx[row];
      *ok = s >= 0;
      return base + (s < 0 ? 0 : s) * kv_rows.stride * 2;
    };
  };

  // Barriers. Named (bar.sync by the waiting side, bar.arrive by the other): warpgroups 0 and 1
  // (256 threads) for P and alpha; the producer's own warps; warpgroup 0's warps; the consumers'
  // epilogue. mbarriers: Q landed; per stage s: "staged" (the tile's slot indices are in shared
  // memory), per half h "full" (the half landed; for the low half also the indices' valid bits are
  // visible), and for the low half "empty" (its last reader, warpgroup 0, is done with it).
  constexpr int kBarPReady = 1;     // P and alpha of tile t written (0 -> 1)
  constexpr int kBarPv1Done = 2;    // warpgroup 1 done reading P and alpha of tile t (1 -> 0)
  constexpr int kBarProducer = 3;   // the producer's warps: tile t's indices staged
  constexpr int kBarConsumers = 4;  // warpgroups 0 and 1: row sums written, every wgmma complete
  constexpr int kBarWg0 = 5;        // warpgroup 0: its shared decision is written
  constexpr int kConsumers = 256, kProducers = 128;
  const unsigned bar_q = SmemAddr(&sm.bar_q);
  auto full_bar = [&](int t, int h) { return SmemAddr(&sm.full[t & 1][h]); };
  auto empty_bar = [&](int t) { return SmemAddr(&sm.empty[t & 1]); };
  auto staged_bar = [&](int t) { return SmemAddr(&sm.staged[t & 1]); };
  if (tid == 0) {
    MbarInit(bar_q, kProducers);
    for (int s = 0; s < 2; ++s) {
      MbarInit(SmemAddr(&sm.staged[s]), kProducers);
      // The low half: every producer thread's copies and its plain arrival (the valid bits); the
      // high half: the copies of warpgroup 1's threads.
      MbarInit(SmemAddr(&sm.full[s][0]), 2 * kProducers);
      MbarInit(SmemAddr(&sm.full[s][1]), 128);
      MbarInit(SmemAddr(&sm.empty[s]), 128);  // warpgroup 0's threads
    }
  }
  __syncthreads();

  if (wg == 2) {
    // ---- Producer: Q, then per tile t the indices (loaded one tile ahead) and the low half.
    WarpgroupRegsDec<kProducerRegs>();
    const int pw = warp - 8, i = tid - kConsumers;  // producer warp 0-3; index 0-127
    CopyTileRows<kWholeRows>(q_addr, pw, 4, lane, [&](int row, bool* ok) {
      const int rg = m0 + row;
      *ok = rg < rows_b;
      const long long tok = *ok ? rg / kHeads : 0;
      return reinterpret_cast<const char*>(p.q + (rq.q0 + tok) * p.q_stride_n + (rg % kHeads) * p.q_stride_h);
    });
    CpAsyncMbarArrive(bar_q);
    long long raw_next = i < kTile ? kv_rows.Raw(p, 0, i) : kPastEnd;
    for (int t = 0; t < num_tiles; ++t) {
      if (i < kTile) {  // warps 8 and 9, whole
        const long long raw = raw_next;
        raw_next = t + 1 < num_tiles ? kv_rows.Raw(p, t + 1, i) : kPastEnd;
        const long long v = kv_rows.Validate(p, raw);
        sm.idx[t % kIdxRing][i] = v;
        const unsigned bits = __ballot_sync(0xffffffffu, v >= 0);
        if (lane == 0) sm.valid[t % kIdxRing][i >> 5] = bits;
      }
      NamedBarrier(kBarProducer, kProducers);
      MbarArrive(staged_bar(t));  // for warpgroup 1's gather of the high half
      if (t >= 2) MbarWait(empty_bar(t), ((t >> 1) & 1) ^ 1);  // tile t - 2's phase
      CopyTileRows<kLowHalf>(SmemAddr(sm.kv[t & 1]), pw, 4, lane, tile_row_src(t));
      CpAsyncMbarArrive(full_bar(t, 0));
      MbarArrive(full_bar(t, 0));  // sm.valid of tile t
    }
    CpAsyncWait<0>();  // every copy has landed by now (the consumers waited for them); for the tools
    return;
  }

  WarpgroupRegsInc<kConsumerRegs>();
  // This thread's accumulator rows (both warpgroups use the same rows; O columns differ).
  const int row0 = 16 * wq + (lane >> 2);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  auto rescale_o = [&](float a0, float a1) {
    if (__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        o[4 * j] *= a0;
        o[4 * j + 1] *= a0;
        o[4 * j + 2] *= a1;
        o[4 * j + 3] *= a1;
      }
    }
  };
  // Waits for half h of tile t. cp.async writes through the generic proxy, so the consumer's fence
  // then orders its wgmma reads after them.
  auto wait_full = [&](int t, int h) {
    MbarWait(full_bar(t, h), (t >> 1) & 1);
    FenceProxyAsyncShared();
  };

  // O += P.V over value columns 256 * wg ...: V is N-major (KV rows = K) in groups 4wg..4wg+3.
  auto issue_pv = [&](unsigned kv_addr) {
    const unsigned long long pd = Opaque(WgmmaDesc(p_addr, 16, kAtomBytes));
    const unsigned long long vd = WgmmaDesc(kv_addr + 4 * wg * kGroupBytes, kGroupBytes, kAtomBytes);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      WgmmaM64N256K16Nt(o, WgmmaDescAdvance(pd, kk * 32), WgmmaDescAdvance(vd, kk * 2 * kAtomBytes), true);
    }
    WgmmaCommit();
  };
  float m_run[2] = {NegInf(), NegInf()}, l_run[2] = {0.f, 0.f};  // warpgroup 0's rows
  // Final row sums go where P was: after the last kBarPv1Done nothing reads P.
  float* row_sums = reinterpret_cast<float*>(sm.p);

  if (wg == 0) {
    const float scale = tree ? p.tree_scale_log2 : p.prefix_scale_log2;
    float s[32];
    // S = Q.K^T of tile t: 36 k-steps of 16 dims; step ks is group ks / 4, +32 bytes within it. The
    // low half's 16 steps go out as soon as it has landed, the high half's 20 when it has.
    auto issue_qk = [&](int t) {
      const unsigned long long qd = Opaque(WgmmaDesc(q_addr, 16, kAtomBytes));
      const unsigned long long kd = WgmmaDesc(SmemAddr(sm.kv[t & 1]), 16, kAtomBytes);
      wait_full(t, 0);
#pragma unroll
      for (int ks = 0; ks < kKDim / 16; ++ks) {
        if (ks == 16) wait_full(t, 1);
        const unsigned off = (ks >> 2) * kGroupBytes + (ks & 3) * 32;
        WgmmaM64N64K16(s, WgmmaDescAdvance(qd, off), WgmmaDescAdvance(kd, off), ks > 0);
      }
      WgmmaCommit();
    };
    MbarWait(bar_q, 0);
    FenceProxyAsyncShared();
    WgmmaFence();
    issue_qk(0);
    WgmmaWait<0>();
    WgmmaPin(s);
    for (int t = 0; t < num_tiles; ++t) {
      // ---- Scale and mask; online softmax (LazyMaxUpdate): s becomes P in fp32.
      const unsigned vbits[2] = {sm.valid[t % kIdxRing][0], sm.valid[t % kIdxRing][1]};
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rg = m0 + row0 + 8 * h;
        float mx = NegInf();
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * j + 2 * (lane & 3) + e;
            bool valid = (vbits[col >> 5] >> (col & 31)) & 1u;
            if (tree) valid = valid && rg < rows_b && mask.Allowed(p, rg / kHeads, t * kTile + col, rq.draft);
            const float v = valid ? s[4 * j + 2 * h + e] * scale : NegInf();
            s[4 * j + 2 * h + e] = v;
            mx = fmaxf(mx, v);
          }
        }
        mx = QuadMax(mx);
        const float m_use = LazyMaxUpdate(m_run[h], mx, alpha[h]);
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = FastExp2(s[4 * j + 2 * h + e] - m_use);
            s[4 * j + 2 * h + e] = pv;
            sum += pv;
          }
        }
        l_run[h] = l_run[h] * alpha[h] + sum;
      }
      // ---- P and alpha to shared memory once warpgroup 1 is done with tile t-1's.
      if (t > 0) NamedBarrier(kBarPv1Done, kConsumers);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        unsigned char* prow = reinterpret_cast<unsigned char*>(sm.p) + row * 128 + (lane & 3) * 4;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          *reinterpret_cast<unsigned*>(prow + ((j ^ (row & 7)) << 4)) = PackBf16x2(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]);
        if ((lane & 3) == 0) sm.alpha[row] = alpha[h];
      }
      FenceProxyAsyncShared();  // P, for the wgmma reads of both warpgroups
      NamedBarrierArrive(kBarPReady, kConsumers);
      // ---- O0 += P.V, then the next tile's Q.K^T. The low half of tile t's stage is free once
      // this P.V is done (Q.K^T of tile t was waited for before the softmax). If tile t+1 has landed,
      // its Q.K^T goes out right behind the P.V (the tensor cores go from one to the other); if not,
      // the P.V is finished first and the half released, so that the gather of tile t+2 does not wait
      // for tile t+1's. The decision is warpgroup-uniform (wgmma is issued by the whole warpgroup).
      rescale_o(alpha[0], alpha[1]);
      issue_pv(SmemAddr(sm.kv[t & 1]));
      bool landed = false;
      if (t + 1 < num_tiles) {
        if (wq == 0 && lane == 0) {
          const unsigned par = ((t + 1) >> 1) & 1;
          sm.landed[t & 1] = MbarTest(full_bar(t + 1, 0), par) && MbarTest(full_bar(t + 1, 1), par);
        }
        NamedBarrier(kBarWg0, 128);
        landed = sm.landed[t & 1] != 0;
      }
      if (t + 1 < num_tiles && !landed) {
        WgmmaWait<0>();
        WgmmaPin(o);
        if (t + 2 < num_tiles) MbarArrive(empty_bar(t));
        issue_qk(t + 1);
        WgmmaWait<0>();
        WgmmaPin(s);
      } else if (t + 1 < num_tiles) {
        issue_qk(t + 1);
        WgmmaWait<1>();
        WgmmaPin(o);
        if (t + 2 < num_tiles) MbarArrive(empty_bar(t));
        WgmmaWait<0>();
        WgmmaPin(s);
      } else {
        WgmmaWait<0>();
        WgmmaPin(o);
      }
    }
    NamedBarrier(kBarPv1Done, kConsumers);  // the last tile's: warpgroup 1 is done with alpha and P
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = QuadSum(l_run[h]);
      if ((lane & 3) == 0) row_sums[row0 + 8 * h] = l;
    }
  } else {
    // The high half of every tile: warpgroup 1 is its last reader (Q.K^T of tile t is done before
    // warpgroup 0's softmax), so it refills it with tile t + 2 as soon as its P.V of tile t is done.
    auto gather_high = [&](int t) {
      MbarWait(staged_bar(t), (t >> 1) & 1);
      CopyTileRows<kHighHalf>(SmemAddr(sm.kv[t & 1]), wq, 4, lane, tile_row_src(t));
      CpAsyncMbarArrive(full_bar(t, 1));
    };
    for (int t = 0; t < 2 && t < num_tiles; ++t) gather_high(t);
    for (int t = 0; t < num_tiles; ++t) {
      NamedBarrier(kBarPReady, kConsumers);
      wait_full(t, 1);  // complete already (warpgroup 0 waited for it); the fence is this thread's
      rescale_o(sm.alpha[row0], sm.alpha[row0 + 8]);
      issue_pv(SmemAddr(sm.kv[t & 1]));
      WgmmaWait<0>();
      WgmmaPin(o);
      // Warpgroup 0 overwrites alpha and P once this arrives: bar.arrive orders this thread's
      // earlier reads before the barrier completes (PTX ISA, barrier{.cta}).
      NamedBarrierArrive(kBarPv1Done, kConsumers);
      if (t + 2 < num_tiles) gather_high(t + 2);
    }
    CpAsyncWait<0>();  // every copy has landed by now (its tiles were waited for); for the tools
  }
  NamedBarrier(kBarConsumers, kConsumers);  // row sums visible; every wgmma has completed

  // ---- Normalized partial O through shared memory (stage 0, rows of 1 KB with 16-byte chunks
  // XOR-swizzled by row % 8), then written with coalesced 16-byte stores; LSE from warpgroup 0.
  const float v_scale = tree ? 1.f : p.v_scale;
  unsigned char* stage_o = reinterpret_cast<unsigned char*>(sm.kv[0]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    const float l = row_sums[row];
    const float inv = l > 0.f ? v_scale / l : 0.f;
    unsigned char* dst = stage_o + row * 1024 + (lane & 3) * 4;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int chunk = 32 * wg + j;
      *reinterpret_cast<unsigned*>(dst + ((chunk ^ (row & 7)) << 4)) =
          PackBf16x2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
    }
    if (wg == 0 && (lane & 3) == 0 && m0 + row < rows_b)
      part_lse[m0 + row] = l > 0.f ? m_run[h] + __log2f(l) : NegInf();
  }
  NamedBarrier(kBarConsumers, kConsumers);
  const int rows = rows_b - m0 < kRows ? rows_b - m0 : kRows;
  uint4* out = reinterpret_cast<uint4*>(part_o + static_cast<long long>(m0) * kVDim);
  for (int i = tid; i < rows * 64; i += kConsumers) {
    const int row = i >> 6, chunk = i & 63;
    out[i] = *reinterpret_cast<const uint4*>(stage_o + row * 1024 + ((chunk ^ (row & 7)) << 4));
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace mla
}  // namespace kjit
