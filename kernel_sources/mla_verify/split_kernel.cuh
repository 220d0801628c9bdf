// The split kernel: one CTA = (kRows query rows of request b) x (one prefix chunk, or the draft tree
// for split 0). Streams its KV rows through a 2-stage cp.async pipeline of kKvTile-row tiles,
// computes S = Q.K^T and O += P.V with mma.sync, keeps an fp32 online softmax per row, and writes
// the normalized partial O (bf16) and its log2-LSE (fp32) into the workspace for the combine kernel.
//
// An fp8 e4m3 cache (kFp8): a prefix CTA's cp.async lands each tile's 576-byte rows in a staging ring
// (SmemPlanFp8::kv8), and at the top of the tile's step, once the next tile's copies are issued, the
// CTA converts them exactly to bf16 into the stage the MMAs read (one more barrier per tile). With
// fp8 numerics (MlaVerifyParams::flags' kFp8RoundBit) Q is rounded to e4m3 in place once it has landed, and P
// is rounded to e4m3 before P.V. The tree CTA (k_extend, bf16) runs as with a bf16 cache.
#pragma once

#include "common/bf16.cuh"
#include "common/cp_async.cuh"
#include "common/fp8.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "common/swizzle.cuh"
#include "common/sync.cuh"
#include "mla_verify/mask.cuh"
#include "mla_verify/params.h"
#include "mla_verify/request.cuh"
#include "mla_verify/timeline.cuh"
#include "mla_verify/traits.h"

namespace kjit {
namespace mla {

template <int kHeads, bool kPackedMask, class Cfg, bool kFp8 = false>
__device__ __forceinline__ void SplitKernelBody(const MlaVerifyParams& p) {
  constexpr int kTile = Cfg::kKvTile;
  constexpr int kChunks = Cfg::kChunksPerRow;  // 72
  constexpr int kPChunks = kPRowElems * 2 / 16;  // 8
  constexpr unsigned kRowBytes = kKDim * 2;      // 1152
  constexpr int kThreads = Cfg::kThreads;
  static_assert((kTile * kChunks) % kThreads == 0 && (Cfg::kRows * kChunks) % kThreads == 0,
                "gathers split evenly over the CTA");

  using Smem = typename Conditional<kFp8, SmemPlanFp8<Cfg>, SmemPlan<Cfg>>::type;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  const int m_tile = blockIdx.x, split = SplitOfCta(), b = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int kColGroups = Cfg::kColGroups;
  const int g = warp / kColGroups, cg = warp % kColGroups;

  SplitCta cta;
  const bool has_rows = BeginSplitCta<kHeads, Cfg::kRows>(p, b, split, m_tile, tid, kThreads, &cta);
  KJIT_STAMP(kTlRequest);
  if (!has_rows) return;
  const Request rq = cta.rq;
  const int rows_b = cta.rows_b, m0 = cta.m0;
  const bool tree = split == 0;
  long long kv_begin = 0, kv_end = rq.draft;
  if (!tree) PrefixChunk<kTile>(rq.prefix, p.num_splits, split, &kv_begin, &kv_end);

  const StateRows state = StateOf(p, b, split);
  float* part_lse = state.lse;
  unsigned short* part_o = state.o;
  if (kv_begin >= kv_end) {
    WriteEmptyState(part_lse, part_o, m0, rows_b, Cfg::kRows, tid, kThreads);
    return;
  }
  const int num_tiles = static_cast<int>((kv_end - kv_begin + kTile - 1) / kTile);

  TreeMask<kPackedMask> mask;
  if (tree) {
    mask.Init(p, b, rq);
    if (!mask.ok && tid == 0) RaiseError(kErrBadIndptr);
  }

  // Source row of KV row i of tile t: a kv_cache slot (prefix) or a k_extend row (tree); -1 when
  // past the chunk or out of range (never dereferenced; the column is masked).
  const KvRows<kTile> kv_rows(p, rq, tree, kv_begin, kv_end, kFp8 ? 1 : 2);
  const bool fp8_rows = kFp8 && !tree;                // this CTA reads e4m3 cache rows
  const bool round_p = fp8_rows && (p.flags & kFp8RoundBit) != 0;  // fp8 numerics: P (and Q) rounded to e4m3
  constexpr long long kPastEnd = KvRows<kTile>::kPastEnd;
  auto load_raw = [&](int t, int i) { return kv_rows.Raw(p, t, i); };
  auto validate = [&](long long raw, int t, int i) { return kv_rows.Validate(p, raw, t, i); };
  // Warp w gathers rows w, w + kWarps, ...: lane copies chunks lane, lane + 32, lane + 64 (< 72) of
  // the row, so a row costs one index load and one 64-bit address (few registers live beside O).
  auto gather = [&](int t) {
    const long long* idx = sm.idx[t % kIdxRing];
    if constexpr (kFp8) {
      if (fp8_rows) {  // 576-byte rows into the staging ring: lane copies chunks lane (and 32 + lane)
        const unsigned dst8 = SmemAddr(sm.kv8[t % Cfg::kStages]) + lane * 16;
        const char* base8 = reinterpret_cast<const char*>(kv_rows.base) + lane * 16;
#pragma unroll 2
        for (int row = warp; row < kTile; row += Cfg::kWarps) {
          const long long s = idx[row];
          const char* src = base8 + (s < 0 ? 0 : s) * kKDim;
          CpAsync16(dst8 + row * kKDim, src, s >= 0);
          if (lane < kKDim / 16 - 32) CpAsync16(dst8 + row * kKDim + 512, src + 512, s >= 0);
        }
        return;
      }
    }
    const unsigned dst = SmemAddr(sm.kv[t % Cfg::kStages]);
    const char* base = reinterpret_cast<const char*>(kv_rows.base) + lane * 16;
#pragma unroll 2
    for (int row = warp; row < kTile; row += Cfg::kWarps) {
      const long long s = idx[row];
      const char* src = base + (s < 0 ? 0 : s) * kv_rows.row_bytes;
      // chunk c + 32k XOR (row % 8) only changes c's low three bits: +512 bytes per k.
      const unsigned d = dst + row * kRowBytes + ((lane ^ (row & 7)) << 4);
      CpAsync16(d, src, s >= 0);
      CpAsync16(d + 512, src + 512, s >= 0);
      if (lane < kChunks - 64) CpAsync16(d + 1024, src + 1024, s >= 0);
    }
  };

  // Prologue: indices of tiles 0 and 1, then Q and tile 0 in one cp.async group.
  if (tid < kTile) {
    sm.idx[0][tid] = validate(load_raw(0, tid), 0, tid);
    sm.idx[1][tid] = num_tiles > 1 ? validate(load_raw(1, tid), 1, tid) : -1;
  }
  __syncthreads();
  {
    const unsigned dst = SmemAddr(sm.q);
#pragma unroll
    for (int it = 0; it < Cfg::kRows * kChunks / kThreads; ++it) {
      const int j = it * kThreads + tid, row = j / kChunks, c = j % kChunks;
      const int rg = m0 + row;
      const bool ok = rg < rows_b;
      const long long tok = ok ? rg / kHeads : 0;
      const unsigned short* src = p.q + (rq.q0 + tok) * p.q_stride_n + (rg % kHeads) * p.q_stride_h + c * 8;
      CpAsync16(dst + SwizzledOffset<kChunks>(row, c), src, ok);
    }
  }
  gather(0);
  CpAsyncCommit();
  KJIT_STAMP(kTlTile0Issued);

  float o[Cfg::kMTiles][Cfg::kVNTiles][4];
  float m_run[Cfg::kMTiles][2], l_run[Cfg::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < Cfg::kVNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.f;
    m_run[mt][0] = m_run[mt][1] = NegInf();
    l_run[mt][0] = l_run[mt][1] = 0.f;
  }
  const float scale = tree ? p.tree_scale_log2 : p.prefix_scale_log2;
  const int warp_row0 = g * Cfg::kWarpRows;
  // Per-lane ldmatrix bases (see LaneSwizzle): A rows lane % 16 with chunk +lane/16; Q.K^T B rows
  // (n) with chunk +(lane/8)%2; P.V B rows (kv) lane % 8 (+8 for lanes 8-15, 24-31) with chunk +lane/16.
  const LaneSwizzle swz_a(lane, lane >> 4), swz_b(lane, (lane >> 3) & 1);
  const unsigned q_lane = SmemAddr(sm.q) + (warp_row0 + (lane & 15)) * kRowBytes;
  const unsigned p_lane = SmemAddr(sm.p) + (warp_row0 + (lane & 15)) * (kPChunks * 16);
  const unsigned k_lane_off =
      (cg * Cfg::kQkCols + (Cfg::kQkNTiles == 2 ? ((lane >> 4) << 3) : 0) + (lane & 7)) * kRowBytes;
  const unsigned v_lane_off = ((((lane >> 3) & 1) << 3) + (lane & 7)) * kRowBytes + cg * (Cfg::kVCols * 2);

  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<0>();
    __syncthreads();  // tile t visible to all; every warp is done with tile t-1's stage
    if (t == 0) KJIT_STAMP(kTlQLanded);
    if (t + 1 < num_tiles) gather(t + 1);
    CpAsyncCommit();
    if constexpr (kFp8) {
      if (fp8_rows) {  // tile t's bytes -> bf16 in its stage (free: tile t-2 was read before the barrier)
        const unsigned char* src8 = sm.kv8[t % Cfg::kStages];
        unsigned char* dst = reinterpret_cast<unsigned char*>(sm.kv[t % Cfg::kStages]);
        constexpr int kPieces = kTile * kChunks;  // 8-byte pieces of e4m3 = 16-byte chunks of bf16
#pragma unroll
        for (int it = 0; it < kPieces / kThreads; ++it) {
          const int j = it * kThreads + tid, row = j / kChunks, c = j % kChunks;
          const uint2 v = *reinterpret_cast<const uint2*>(src8 + row * kKDim + c * 8);
          *reinterpret_cast<uint4*>(dst + SwizzledOffset<kChunks>(row, c)) = E4m3x8ToBf16(v);
        }
        if (t == 0 && round_p) {  // fp8 numerics: Q to e4m3, in place (its rows are whole chunks)
          uint4* q4 = reinterpret_cast<uint4*>(sm.q);
          for (int j = tid; j < Cfg::kRows * kChunks; j += kThreads) q4[j] = RoundBf16x8ToE4m3(q4[j]);
        }
        __syncthreads();
      }
    }
    const bool stage_next = tid < kTile && t + 2 < num_tiles;
    const long long raw_next = stage_next ? load_raw(t + 2, tid) : kPastEnd;  // used after the tile

    const unsigned kv_addr = SmemAddr(sm.kv[t % Cfg::kStages]);
    // Tree part: the mask bits of this thread's S elements, loaded before Q.K^T so their latency
    // hides behind it (bit (mt * 2 + h) * 2 * kQkNTiles + nt * 2 + j).
    unsigned tree_bits = ~0u;
    if (tree) {
      tree_bits = 0;
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int nt = 0; nt < Cfg::kQkNTiles; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const int rg = m0 + warp_row0 + mt * 16 + h * 8 + (lane >> 2);
              const int col = cg * Cfg::kQkCols + nt * 8 + (lane & 3) * 2 + j;
              const bool ok = rg < rows_b && mask.Allowed(p, rg / kHeads, t * kTile + col, rq.draft);
              tree_bits |= (ok ? 1u : 0u) << (((mt * 2 + h) * Cfg::kQkNTiles + nt) * 2 + j);
            }
    }
    // ---- S = Q.K^T over the warp's kQkCols KV columns.
    float s[Cfg::kMTiles][Cfg::kQkNTiles][4];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < Cfg::kQkNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
    // Fragments of k-step ks (16 of the 576 dims); ks is a compile-time constant after unrolling.
    auto load_qk = [&](int ks, unsigned (&a)[Cfg::kMTiles][4], unsigned (&bk)[4]) {
      const int grp = ks >> 2, j = ks & 3;  // 8 chunks = 4 k-steps per 128-byte group
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt)
        LdMatrixX4(a[mt], q_lane + mt * 16 * kRowBytes + grp * 128 + swz_a.x[j]);
      if constexpr (Cfg::kQkNTiles == 2) {
        LdMatrixX4(bk, kv_addr + k_lane_off + grp * 128 + swz_b.x[j]);
      } else {
        unsigned b2[2];
        LdMatrixX2(b2, kv_addr + k_lane_off + grp * 128 + swz_b.x[j]);
        bk[0] = b2[0];
        bk[1] = b2[1];
      }
    };
    auto mma_qk = [&](const unsigned (&a)[Cfg::kMTiles][4], const unsigned (&bk)[4]) {
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
        MmaBf16(s[mt][0], a[mt], bk[0], bk[1]);
        if constexpr (Cfg::kQkNTiles == 2) MmaBf16(s[mt][1], a[mt], bk[2], bk[3]);
      }
    };
    // Software pipeline: the next k-step's fragments are requested before this step's mma.
    {
      constexpr int kSteps = kKDim / 16;
      static_assert(kSteps % 2 == 0, "k-steps go in pairs");
      unsigned a0[Cfg::kMTiles][4], b0[4], a1[Cfg::kMTiles][4], b1[4];
      load_qk(0, a0, b0);
#pragma unroll
      for (int ks = 0; ks < kSteps; ks += 2) {
        load_qk(ks + 1, a1, b1);
        mma_qk(a0, b0);
        if (ks + 2 < kSteps) load_qk(ks + 2, a0, b0);
        mma_qk(a1, b1);
      }
    }

    // ---- Scale, mask, and the tile's row maxima (shared with the row group's other warps).
    const long long* idx_t = sm.idx[t % kIdxRing];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + mt * 16 + h * 8 + (lane >> 2);
        float mx = NegInf();
#pragma unroll
        for (int nt = 0; nt < Cfg::kQkNTiles; ++nt) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int col = cg * Cfg::kQkCols + nt * 8 + (lane & 3) * 2 + j;
            const bool valid =
                idx_t[col] >= 0 && ((tree_bits >> (((mt * 2 + h) * Cfg::kQkNTiles + nt) * 2 + j)) & 1u);
            const float v = valid ? s[mt][nt][h * 2 + j] * scale : NegInf();
            s[mt][nt][h * 2 + j] = v;
            mx = fmaxf(mx, v);
          }
        }
        mx = QuadMax(mx);
        if ((lane & 3) == 0) sm.row_buf[cg][row] = mx;
      }
    }
    NamedBarrier(1 + g, 32 * kColGroups);

    // ---- Online softmax update; P (bf16) to shared memory for the whole row group.
    float alpha_r[Cfg::kMTiles][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + mt * 16 + h * 8 + (lane >> 2);
        float tile_max = sm.row_buf[0][row];
#pragma unroll
        for (int c = 1; c < kColGroups; ++c) tile_max = fmaxf(tile_max, sm.row_buf[c][row]);
        // Every warp of the row group sees the same maxima, so they take the same lazy decision.
        float alpha;
        const float m_use = LazyMaxUpdate(m_run[mt][h], tile_max, alpha);
        alpha_r[mt][h] = alpha;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < Cfg::kQkNTiles; ++nt) {
          const float p0 = FastExp2(s[mt][nt][h * 2] - m_use);
          const float p1 = FastExp2(s[mt][nt][h * 2 + 1] - m_use);
          sum += p0 + p1;
          const int col = cg * Cfg::kQkCols + nt * 8 + (lane & 3) * 2;
          unsigned char* dst = reinterpret_cast<unsigned char*>(sm.p) +
                               SwizzledOffset<kPChunks>(row, col >> 3) + (col & 7) * 2;
          *reinterpret_cast<unsigned*>(dst) = round_p ? RoundToE4m3PairBf16x2(p0, p1) : PackBf16x2(p0, p1);
        }
        l_run[mt][h] = l_run[mt][h] * alpha + sum;
        rescale |= alpha != 1.f;
      }
    }
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < Cfg::kVNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][nt][e] *= alpha_r[mt][e >> 1];
    }
    NamedBarrier(1 + g, 32 * kColGroups);

    // ---- O += P.V over the warp's kVCols V columns (V = first 512 dims of the same tile).
    auto pv_step = [&](int kk) {
      unsigned a[Cfg::kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt)
        LdMatrixX4(a[mt], p_lane + mt * 16 * 128 + (((2 * kk + (lane >> 4)) ^ (lane & 7)) << 4));
      auto load_v = [&](int np, unsigned (&bv)[4]) {
        LdMatrixX4Trans(bv, kv_addr + v_lane_off + kk * 16 * kRowBytes + (np / 4) * 128 + swz_a.x[np % 4]);
      };
      auto mma_v = [&](int np, const unsigned (&bv)[4]) {
#pragma unroll
        for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
          MmaBf16(o[mt][2 * np], a[mt], bv[0], bv[1]);
          MmaBf16(o[mt][2 * np + 1], a[mt], bv[2], bv[3]);
        }
      };
      constexpr int kPairs = Cfg::kVNTiles / 2;
      static_assert(kPairs % 2 == 0, "V column pairs go in pairs");
      unsigned bv0[4], bv1[4];
      load_v(0, bv0);
#pragma unroll
      for (int np = 0; np < kPairs; np += 2) {
        load_v(np + 1, bv1);
        mma_v(np, bv0);
        if (np + 2 < kPairs) load_v(np + 2, bv0);
        mma_v(np + 1, bv1);
      }
    };
    // A rolled loop of one trip would pass its "unroll 1" on to the np loop (O then lives in local
    // memory), so a single 16-row step is called directly.
    if constexpr (kTile / 16 == 1) {
      pv_step(0);
    } else {
#pragma unroll 1
      for (int kk = 0; kk < kTile / 16; ++kk) pv_step(kk);
    }
    if (stage_next) sm.idx[(t + 2) % kIdxRing][tid] = validate(raw_next, t + 2, tid);
  }

  // ---- Row sums across the four warps of a row group, then the normalized partial state.
  __syncthreads();
  KJIT_STAMP(kTlLoopEnd);
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = QuadSum(l_run[mt][h]);
      if ((lane & 3) == 0) sm.row_buf[cg][warp_row0 + mt * 16 + h * 8 + (lane >> 2)] = l;
    }
  __syncthreads();
  const float v_scale = tree ? 1.f : p.v_scale;
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + mt * 16 + h * 8 + (lane >> 2);
      float l = 0.f;
#pragma unroll
      for (int c = 0; c < kColGroups; ++c) l += sm.row_buf[c][row];
      if (m0 + row >= rows_b) continue;
      const float inv = l > 0.f ? v_scale / l : 0.f;
      unsigned short* dst = part_o + static_cast<long long>(m0 + row) * kVDim + cg * Cfg::kVCols + (lane & 3) * 2;
#pragma unroll
      for (int nt = 0; nt < Cfg::kVNTiles; ++nt)
        *reinterpret_cast<unsigned*>(dst + nt * 8) = PackBf16x2(o[mt][nt][h * 2] * inv, o[mt][nt][h * 2 + 1] * inv);
      if (cg == 0 && (lane & 3) == 0)
        part_lse[m0 + row] = l > 0.f ? m_run[mt][h] + __log2f(l) : NegInf();
    }
  }
}

}  // namespace mla
}  // namespace kjit
