// The split kernel for the 99 KB arches with Q in registers (TileQReg32x32, traits.h): the same
// contract as split_kernel.cuh (one CTA = 32 query rows of request b x one prefix chunk, or the
// draft tree for split 0; normalized bf16 partial O and log2-LSE into the workspace), computed with
// mma.sync by 8 warps that each issue several MMAs per fragment they load.
//
// Warp w = 4g + c serves the 16 query rows of row group g (rows 16g..16g+15 of the CTA's 32):
// - Q.K^T: the warp holds Q's A fragments for the k-steps ks = c, c + 4, ..., c + 32 of the 576 dims
//   (9 of the 36, 36 registers, loaded once) and multiplies them with the whole 32-row KV tile (4
//   n-tiles, two ldmatrix.x4 per k-step for four MMAs). The four warps of a row group add their
//   partial S through shared memory in a fixed order (deterministic), each warp keeping the 8 KV
//   columns 8c..8c+7 for the softmax.
// - Softmax: scale, mask, row maxima across the row group's four warps, the lazy online update
//   (every warp of a row group sees the same maxima and takes the same decision), P (bf16; f16 over
//   an fp8 cache) into shared memory. With a bf16 cache, from tile 1 on (kVoteMaxima): P against the
//   running maxima at once, and a vote of the CTA (__syncthreads_or) on whether any score passes its
//   row's max by more than the lazy update keeps; only then the maxima's exchange and P again (the
//   same values).
// - P.V: the warp adds its row group's P times V columns 128c..128c+127 (16 n-tiles, 64 fp32
//   registers of O): per 16 KV rows one ldmatrix.x4 of P and eight transposed ldmatrix.x4 of V for
//   16 MMAs.
// KV tiles of 32 rows stream through a 2-stage cp.async ring; Q first lands in stage 1 (32 rows of
// 1152 bytes, one stage) and leaves it for registers before tile 1 is gathered there. Warp 0 stages
// each tile's row source addresses and a word of valid bits a tile ahead (as the sm_90a producer
// does), so the gathers and the softmax do no 64-bit index arithmetic.
//
// An fp8 e4m3 cache (kFp8Rows, the prefix CTAs; the tree CTA reads bf16 k_extend as above): the
// stages hold the cache's own bytes (SmemPlanQRegFp8: 3 stages of 32 rows of 592 bytes, two tiles
// in flight behind the one computed; Q lands in stages 1 and 2), and the MMAs run in f16, into which
// every e4m3 value converts exactly with one cvt per pair after its ldmatrix:
// - Q.K^T: one ldmatrix.x4 of a k-step gives each lane four e4m3 bytes (dims 4q..4q+3 of its KV row,
//   q = lane % 4) per n-tile: the B fragment of dims {4q, 4q+1 | 4q+2, 4q+3} where the MMA's k order
//   has {2q, 2q+1 | 2q+8, 2q+9}. Q's A fragments are read in that same permuted order (a dot product
//   does not depend on its order), converted to f16 once: with dequant numerics each row is scaled
//   by a power of two that puts its largest |q| in [2^14, 2^15) (exact: f16 holds bf16's 8
//   significant bits above 2^-14, and the scores are multiplied back by the same power), with fp8
//   numerics rounded to e4m3 (exact in f16).
// - P.V: one ldmatrix.x4.trans of two 16-dim chunks gives each lane the bytes (KV rows 2q, 2q + 1) x
//   (dims 2n, 2n + 1) (n = lane / 4); a byte permute pairs them into the B fragments of the n-tile of
//   even dims and of odd dims, so the lane's O columns are dims 4q..4q+3 of each chunk.
// - P in f16, times 2^7 (dequant numerics; then more precise than bf16 for every weight above 2^-21
//   of the largest) or rounded to e4m3 (fp8 numerics); the tree CTA's P stays bf16.
// - fp8 numerics' Q.K^T: Q is e4m3 too, so k-steps 2i and 2i + 1 go into one e4m3 MMA (m16n8k32, sm_89
//   and later) with K's loaded words as its B fragments, unconverted: half the MMAs and no
//   conversions but k-step 8's (an f16 MMA). Native on sm_120 (twice the bf16 rate); sm_90 has no
//   such MMA and ptxas emulates it with conversions and f16 MMAs, so the sm_120 proxy runs it 2-4%
//   slower than the f16 path and cannot time it (kernel_bench-2026-12-06-h100-sm120-proxy-e4m3mma.md).
//
// (split_kernel.cuh's 32x16 tile on the H200 under the sm_120 proxy, ncu: one warp per scheduler,
// more ldmatrix than MMAs; bench/results/kernel_bench-2026-12-02-h200-sm120-proxy.md.)
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

// KJIT_QREG_EXP (experiments only, kernel_bench --define; 0 in production): 1 = no gathers after the
// prologue (every tile computes on stale stages), 2 = no MMAs (S and O stay zero); both wrong values,
// to split a tile's time between its loads and its math. 3 = the bf16 Q.K^T in two accumulator sets
// (even and odd k-steps, summed after), chains of 5 MMAs instead of 9. 4 = the two row groups
// ping-pong their Q.K^T (row group 1 starts tile t's once row group 0 has issued its own, row group
// 0 starts tile t + 1's once row group 1 has issued tile t's) with no CTA barrier at a tile's top:
// a race on the stages, so wrong values; it times how much one row group's MMAs would overlap the
// other's softmax and P.V.
#ifndef KJIT_QREG_EXP
#define KJIT_QREG_EXP 0
#endif

namespace kjit {
namespace mla {

// fp8 rows: Q's A fragments (f16, qf) for k-steps c + 4j in the permuted k order of split_qreg's
// header, from Q's bf16 rows at q_rows (SmemPlanQReg's swizzled rows). Dequant numerics scale
// each row by a power of two (the rows' largest |q| go across the four quarters through row_buf;
// q_unscale undoes it on S); fp8 numerics round to e4m3, and also fill qe, the e4m3 A fragments of
// the k-step pairs. q_read() runs once every warp has read Q (its stages are free then).
template <int kQSteps, int kQPairs, class QRead>
__device__ __forceinline__ void LoadQFp8Fragments(const unsigned char* q_rows, float (&row_buf)[4][32],
                                                  int warp_row0, int c, int lane, bool round_fp8,
                                                  unsigned (&qf)[kQSteps][4], unsigned (&qe)[kQPairs][4],
                                                  float (&q_unscale)[2][2], QRead q_read) {
  constexpr unsigned kRowBytes = kKDim * 2;
  // Q's A fragments of k-steps c + 4j in the permuted k order (above): rows warp_row0 + lane / 4
  // (+ 8), dims 16 ks + 4q.. (one 8-byte word: the bf16 pairs of a0 and a2).
  const int q4 = lane & 3;
  uint2 w[kQSteps][2];
#pragma unroll
  for (int j = 0; j < kQSteps; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + (lane >> 2) + 8 * h;
      w[j][h] = *reinterpret_cast<const uint2*>(q_rows + row * kRowBytes +
                                                (((2 * (c + 4 * j) + (q4 >> 1)) ^ (row & 7)) << 4) + (q4 & 1) * 8);
    }
  if (!round_fp8) {  // each row's largest |q|: the four quarters' through shared memory
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = 0.f;
#pragma unroll
      for (int j = 0; j < kQSteps; ++j)
        mx = fmaxf(mx, fmaxf(fmaxf(fabsf(Bf16Lo(w[j][h].x)), fabsf(Bf16Hi(w[j][h].x))),
                             fmaxf(fabsf(Bf16Lo(w[j][h].y)), fabsf(Bf16Hi(w[j][h].y)))));
      mx = QuadMax(mx);
      if (q4 == 0) row_buf[c][warp_row0 + (lane >> 2) + 8 * h] = mx;
    }
  }
  __syncthreads();  // the row maxima visible; Q read by every warp, so its stages are free
  q_read();
  float q_scale[2][2] = {{1.f, 1.f}, {1.f, 1.f}};  // 2^e as two exact factors (|e| may pass 127)
  if (!round_fp8) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + (lane >> 2) + 8 * h;
      const float m = fmaxf(fmaxf(row_buf[0][row], row_buf[1][row]), fmaxf(row_buf[2][row], row_buf[3][row]));
      const int e = F16RowScaleExponent(m);
      q_scale[h][0] = Pow2(e / 2);
      q_scale[h][1] = Pow2(e - e / 2);
      q_unscale[h][0] = Pow2(-(e / 2));
      q_unscale[h][1] = Pow2(-(e - e / 2));
    }
  }
  auto to_f16 = [&](unsigned v, int h) {
    if (round_fp8) return RoundToE4m3PairF16x2(Bf16Lo(v), Bf16Hi(v));
    return PackF16x2(Bf16Lo(v) * q_scale[h][0] * q_scale[h][1], Bf16Hi(v) * q_scale[h][0] * q_scale[h][1]);
  };
#pragma unroll
  for (int j = 0; j < kQSteps; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      qf[j][h] = to_f16(w[j][h].x, h);      // a0 / a1: dims 4q, 4q + 1
      qf[j][2 + h] = to_f16(w[j][h].y, h);  // a2 / a3: dims 4q + 2, 4q + 3
    }
#pragma unroll
  for (int i = 0; i < kQPairs; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      qe[i][h] = round_fp8 ? RoundBf16x4ToE4m3x4(w[2 * i][h].x, w[2 * i][h].y) : 0u;
      qe[i][2 + h] = round_fp8 ? RoundBf16x4ToE4m3x4(w[2 * i + 1][h].x, w[2 * i + 1][h].y) : 0u;
    }
}

// kVoteMaxima: the row maxima's exchange only where LazyMaxUpdate may move one (bf16 rows only;
// the bf16 kernels).
template <int kHeads, bool kPackedMask, bool kFp8Rows = false, bool kVoteMaxima = false>
__device__ __forceinline__ void QRegSplitKernelBody(const MlaVerifyParams& p) {
  using Cfg = TileQReg32x32;
  using Smem = typename Conditional<kFp8Rows, SmemPlanQRegFp8, SmemPlanQReg>::type;
  constexpr int kTile = Cfg::kKvTile;          // 32
  constexpr int kChunks = kKDim * 2 / 16;      // 72 16-byte chunks of a 1152-byte row
  constexpr unsigned kRowBytes = kKDim * 2;    // 1152
  constexpr int kThreads = Cfg::kThreads;      // 256
  constexpr int kWarps = Cfg::kWarps;          // 8
  constexpr int kQSteps = Cfg::kQkSteps;       // 9 k-steps of Q.K^T per warp
  constexpr int kVNTiles = Cfg::kVNTiles;      // 16
  static_assert(kTile == 32 && Cfg::kRows == 32 && kWarps == 8, "the warp roles below assume 32 x 32");
  static_assert((kTile * kChunks) % kThreads == 0 && (Cfg::kRows * kChunks) % kThreads == 0,
                "gathers split evenly over the CTA");
  constexpr int kStages = kFp8Rows ? Cfg::kStagesFp8 : Cfg::kStages;
  constexpr int kAhead = kStages - 1;  // tile t + kAhead is gathered while tile t is computed
  constexpr int kRing = kAhead + 2;    // index buffers: tiles t..t+kAhead read, t+kAhead+1 written
  static_assert(kFp8Rows || kRing == kIdxRing, "the bf16 tile's index ring");
  static_assert(!(kFp8Rows && kVoteMaxima), "the vote is for bf16 rows (fp8 rows exchange every tile)");
  constexpr int kQStage = 1;  // Q lands here (fp8: stages 1 and 2), tile 0 beside it
  constexpr unsigned kPitch8 = Cfg::kFp8RowPitch;
  // Dequant numerics' f16 P is P * 2^7 (at most 2^15: the lazy max keeps P <= 2^8), undone with the
  // row's sum. f16 keeps 11 bits down to 2^-14, so only weights below 2^-21 lose bits, by at most
  // 2^-32 each: under 2^-23 in O against |V| <= 448 and a row sum >= 1. Unscaled, weights from 2^-14
  // down would lose them, visibly where a small weight meets a large V.
  constexpr float kF16PScale = 128.f;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  const int m_tile = blockIdx.x, split = SplitOfCta(), b = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = warp >> 2, c = warp & 3;  // row group, quarter (of the dims in Q.K^T, of V in P.V)

  SplitCta cta;
  const bool has_rows = BeginSplitCta<kHeads, Cfg::kRows>(p, b, split, m_tile, tid, kThreads, &cta);
  KJIT_STAMP(kTlRequest);
  if (!has_rows) return;
  const Request rq = cta.rq;
  const int rows_b = cta.rows_b, m0 = cta.m0;
  const bool tree = !kFp8Rows && split == 0;
  long long kv_begin = 0, kv_end = rq.draft;
  if (!tree) PrefixChunk<kTile>(rq.prefix, p.num_splits, split, &kv_begin, &kv_end);

  const StateRows state = StateOf(p, b, split);
  if (kv_begin >= kv_end) {
    WriteEmptyState(state.lse, state.o, m0, rows_b, Cfg::kRows, tid, kThreads);
    return;
  }
  const int num_tiles = static_cast<int>((kv_end - kv_begin + kTile - 1) / kTile);

  TreeMask<kPackedMask> mask;
  if (tree) {
    mask.Init(p, b, rq);
    if (!mask.ok && tid == 0) RaiseError(kErrBadIndptr);
  }
  const KvRows<kTile> kv_rows(p, rq, tree, kv_begin, kv_end, kFp8Rows ? 1 : 2);
  const bool round_fp8 = kFp8Rows && (p.flags & kFp8RoundBit) != 0;  // fp8 numerics: Q and P to e4m3
  constexpr long long kPastEnd = KvRows<kTile>::kPastEnd;

  // Warp w gathers rows w, w + 8, w + 16, w + 24; lane copies chunks lane, lane + 32, lane + 64 (< 72),
  // of an e4m3 row lane and 32 + lane (< 36).
  auto gather = [&](int t) {
    const long long* addr = sm.idx[t % kRing];
    const char* fallback = reinterpret_cast<const char*>(kv_rows.base) + lane * 16;  // masked rows: no bytes read
    if constexpr (kFp8Rows) {
      const unsigned dst = SmemAddr(sm.kv[t % kStages]) + lane * 16;
#pragma unroll
      for (int k = 0; k < kTile / kWarps; ++k) {
        const int row = warp + k * kWarps;
        const long long a = addr[row];
        const bool ok = a >= 0;
        const char* src = ok ? reinterpret_cast<const char*>(a) + lane * 16 : fallback;
        const unsigned d = dst + row * kPitch8;
        CpAsync16(d, src, ok);
        if (lane < kKDim / 16 - 32) CpAsync16(d + 512, src + 512, ok);
      }
      return;
    }
    const unsigned dst = SmemAddr(sm.kv[t % kStages]);
#pragma unroll
    for (int k = 0; k < kTile / kWarps; ++k) {
      const int row = warp + k * kWarps;
      const long long a = addr[row];
      const bool ok = a >= 0;
      const char* src = ok ? reinterpret_cast<const char*>(a) + lane * 16 : fallback;
      // chunk c + 32k XOR (row % 8) only changes c's low three bits: +512 bytes per k.
      const unsigned d = dst + row * kRowBytes + ((lane ^ (row & 7)) << 4);
      CpAsync16(d, src, ok);
      CpAsync16(d + 512, src + 512, ok);
      if (lane < kChunks - 64) CpAsync16(d + 1024, src + 1024, ok);
    }
  };
  // Tile k's row source addresses (-1: masked) and valid bits, by warp 0 whole (tid < kTile), from
  // the slot indices loaded a tile ahead: the gathers and the softmax then do no 64-bit index work.
  auto stage_rows = [&](int k, long long raw) {
    const long long v = kv_rows.Validate(p, raw, k, tid);
    sm.idx[k % kRing][tid] =
        v >= 0 ? reinterpret_cast<long long>(reinterpret_cast<const char*>(kv_rows.base) + v * kv_rows.row_bytes) : -1;
    const unsigned bits = __ballot_sync(0xffffffffu, v >= 0);
    if (tid == 0) sm.valid[k % kRing] = bits;
  };

  // Prologue: indices of tiles 0..kAhead; Q into stage 1 and tile 0 into stage 0, one cp.async
  // group (fp8: tile 1 follows once Q has left for registers).
  // Every slot index is loaded before any is staged: the ballot in stage_rows would otherwise keep
  // each load behind the previous tile's (one more global round trip before the first tile).
  if (tid < kTile) {
    long long raw[kAhead + 1];
#pragma unroll
    for (int k = 0; k <= kAhead; ++k) raw[k] = kv_rows.Raw(p, k, tid);  // kPastEnd past the chunk
#pragma unroll
    for (int k = 0; k <= kAhead; ++k) stage_rows(k, raw[k]);
  }
  __syncthreads();
  const unsigned q_stage = SmemAddr(sm.kv[kQStage]);
  {
#pragma unroll
    for (int it = 0; it < Cfg::kRows * kChunks / kThreads; ++it) {
      const int j = it * kThreads + tid, row = j / kChunks, ch = j % kChunks;
      const int rg = m0 + row;
      const bool ok = rg < rows_b;
      const long long tok = ok ? rg / kHeads : 0;
      const unsigned short* src = p.q + (rq.q0 + tok) * p.q_stride_n + (rg % kHeads) * p.q_stride_h + ch * 8;
      CpAsync16(q_stage + SwizzledOffset<kChunks>(row, ch), src, ok);
    }
  }
  gather(0);
  CpAsyncCommit();
  KJIT_STAMP(kTlTile0Issued);

  const int warp_row0 = 16 * g;
  const float scale = tree ? p.tree_scale_log2 : p.prefix_scale_log2;
  // fp8 rows with dequant numerics: each S row times 2^-e (two exact factors), where Q's row was
  // scaled by 2^e, before the scale.
  float q_unscale[2][2] = {{1.f, 1.f}, {1.f, 1.f}};
  unsigned qf[kQSteps][4];
  // fp8 numerics over fp8 rows: Q's e4m3 A fragments of the k-step pairs (2i, 2i + 1) for the e4m3
  // MMA (m16n8k32: a0 / a1 rows lane / 4 (+ 8), dims 4q..4q+3 of k-step 2i; a2 / a3 of k-step 2i + 1).
  constexpr int kQPairs = kQSteps / 2;  // 4; k-step 8 stays an f16 MMA
  unsigned qe[kQPairs][4];
  CpAsyncWait<0>();
  __syncthreads();
  KJIT_STAMP(kTlQLanded);
  if constexpr (kFp8Rows) {
    LoadQFp8Fragments(reinterpret_cast<const unsigned char*>(sm.kv[kQStage]), sm.row_buf, warp_row0, c, lane,
                      round_fp8, qf, qe, q_unscale, [&]() {
                        if (num_tiles > 1) gather(1);
                        CpAsyncCommit();
                      });
  } else {
    // Q's A fragments of k-steps c + 4j: rows warp_row0 + lane % 16, chunk 2c + lane / 16 of group j.
    const unsigned a_lane =
        q_stage + (warp_row0 + (lane & 15)) * kRowBytes + (((2 * c + (lane >> 4)) ^ (lane & 7)) << 4);
#pragma unroll
    for (int j = 0; j < kQSteps; ++j) LdMatrixX4(qf[j], a_lane + j * 128);
  }

  float o[kVNTiles][4];
#pragma unroll
  for (int nt = 0; nt < kVNTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] = 0.f;
  float m_run[2] = {NegInf(), NegInf()}, l_run[2] = {0.f, 0.f};

  // Per-lane bases. Q.K^T B fragments (K rows n0 + lane % 8 + 8 (lane / 16), chunk 2c + (lane / 8) % 2
  // of group j; n0 = 0 and 16); P.V A fragments (P rows warp_row0 + lane % 16, chunk 2kk + lane / 16);
  // P.V B fragments (V rows lane % 8 + 8 ((lane / 8) % 2), chunk 2 (np % 4) + lane / 16 of group
  // np / 4 of the warp's 256 bytes of columns).
  const unsigned k_lane = (((lane >> 4) << 3) + (lane & 7)) * kRowBytes + (((2 * c + ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
  const unsigned p_lane = SmemAddr(sm.p) + (warp_row0 + (lane & 15)) * 128;
  const unsigned v_lane = ((((lane >> 3) & 1) << 3) + (lane & 7)) * kRowBytes + c * (Cfg::kVCols * 2);
  const LaneSwizzle swz_v(lane, lane >> 4);
  // e4m3 stages: K rows lane (chunk c + 4j of k-step j), V rows lane % 8 + 8 ((lane / 8) % 2) of
  // chunk 8c + lane / 16 (+ 2 per pair of chunks).
  const unsigned k8_lane = lane * kPitch8 + c * 16;
  const unsigned v8_lane = ((((lane >> 3) & 1) << 3) + (lane & 7)) * kPitch8 + (8 * c + (lane >> 4)) * 16;
  // This thread's S elements after the reduction: rows warp_row0 + lane / 4 (+8), columns
  // 8c + 2 (lane % 4) (+1).
  const int s_row = lane >> 2, s_col = 8 * c + 2 * (lane & 3);

  // KV tile t. vote (kVoteMaxima, from tile 1 on): the softmax's row maxima go across the row
  // group's warps only where they may change (below).
  auto run_tile = [&](int t, bool vote) {
    CpAsyncWait<kAhead - 1>();
    // Tile t visible to all; every warp is done with tile t-1's stage (or Q's).
    if (KJIT_QREG_EXP != 4) __syncthreads();
    if (KJIT_QREG_EXP != 1 && t + kAhead < num_tiles) gather(t + kAhead);
    CpAsyncCommit();
    const bool stage_next = tid < kTile && t + kAhead + 1 < num_tiles;
    const long long raw_next = stage_next ? kv_rows.Raw(p, t + kAhead + 1, tid) : kPastEnd;  // used after the tile

    const unsigned kv_addr = SmemAddr(sm.kv[t % kStages]);
    // Tree part: the mask bits of this thread's four S elements, loaded before Q.K^T so their
    // latency hides behind it (bit 2h + j).
    unsigned tree_bits = ~0u;
    if (tree) {
      tree_bits = 0;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int rg = m0 + warp_row0 + h * 8 + s_row;
          const bool ok = rg < rows_b && mask.Allowed(p, rg / kHeads, t * kTile + s_col + j, rq.draft);
          tree_bits |= (ok ? 1u : 0u) << (2 * h + j);
        }
    }

    if (KJIT_QREG_EXP == 4) {
      if (g == 1) NamedBarrier(3, kThreads);
      else if (t > 0) NamedBarrier(4, kThreads);
    }
    // ---- Partial S = Q.K^T over this warp's 9 k-steps, all 32 KV columns.
    float s[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
    if constexpr (kFp8Rows) {
      // Four n-tiles per ldmatrix.x4: register nt holds KV row 8nt + lane / 4's dims 4q..4q+3.
      auto load_k = [&](int j, unsigned (&r)[4]) { LdMatrixX4(r, kv_addr + k8_lane + j * 64); };
      auto mma_k = [&](int j, const unsigned (&r)[4]) {
        if (KJIT_QREG_EXP == 2) return;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          MmaF16(s[nt], qf[j], E4m3x2ToF16x2(static_cast<unsigned short>(r[nt] & 0xffffu)),
                 E4m3x2ToF16x2(static_cast<unsigned short>(r[nt] >> 16)));
      };
      unsigned x[4], y[4];
      if (round_fp8) {
        // Q and K both e4m3: one e4m3 MMA per n-tile for k-steps 2i and 2i + 1 (K's words as loaded,
        // no conversion), then k-step 8 as an f16 MMA.
        unsigned x2[4], y2[4];
        load_k(0, x);
        load_k(1, y);
#pragma unroll
        for (int i = 0; i < kQPairs; ++i) {
          const bool next = i + 1 < kQPairs;
          if (next) {
            load_k(2 * i + 2, x2);
            load_k(2 * i + 3, y2);
          } else {
            load_k(kQSteps - 1, x2);
          }
          if (KJIT_QREG_EXP != 2) {
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) MmaE4m3(s[nt], qe[i], x[nt], y[nt]);
          }
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            x[k] = x2[k];
            if (next) y[k] = y2[k];
          }
        }
        mma_k(kQSteps - 1, x);
      } else {
        load_k(0, x);
#pragma unroll
        for (int j = 0; j < kQSteps; j += 2) {
          if (j + 1 < kQSteps) load_k(j + 1, y);
          mma_k(j, x);
          if (j + 2 < kQSteps) load_k(j + 2, x);
          if (j + 1 < kQSteps) mma_k(j + 1, y);
        }
      }
    } else {
      auto load_k = [&](int j, unsigned (&b0)[4], unsigned (&b1)[4]) {
        LdMatrixX4(b0, kv_addr + k_lane + j * 128);
        LdMatrixX4(b1, kv_addr + k_lane + 16 * kRowBytes + j * 128);
      };
#if KJIT_QREG_EXP == 3
      float s_odd[4][4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_odd[nt][e] = 0.f;
#endif
      auto mma_k = [&](int j, const unsigned (&b0)[4], const unsigned (&b1)[4]) {
        if (KJIT_QREG_EXP == 2) return;
#if KJIT_QREG_EXP == 3
        float(&acc)[4][4] = (j & 1) ? s_odd : s;
#else
        float(&acc)[4][4] = s;
#endif
        MmaBf16(acc[0], qf[j], b0[0], b0[1]);
        MmaBf16(acc[1], qf[j], b0[2], b0[3]);
        MmaBf16(acc[2], qf[j], b1[0], b1[1]);
        MmaBf16(acc[3], qf[j], b1[2], b1[3]);
      };
      unsigned x0[4], x1[4], y0[4], y1[4];
      load_k(0, x0, x1);
#pragma unroll
      for (int j = 0; j < kQSteps; j += 2) {
        if (j + 1 < kQSteps) load_k(j + 1, y0, y1);
        mma_k(j, x0, x1);
        if (j + 2 < kQSteps) load_k(j + 2, x0, x1);
        if (j + 1 < kQSteps) mma_k(j + 1, y0, y1);
      }
#if KJIT_QREG_EXP == 3
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] += s_odd[nt][e];
#endif
    }
    if (KJIT_QREG_EXP == 4) {
      if (g == 0) NamedBarrierArrive(3, kThreads);
      else if (t + 1 < num_tiles) NamedBarrierArrive(4, kThreads);
    }
    // Partial S to shared memory (rows padded to 40 floats: the float2 accesses of a half-warp, four
    // rows, fall in distinct banks).
    {
      float* mine = &sm.s_part[g][c][0][0];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(mine + (s_row + 8 * h) * Cfg::kSPad + 8 * nt + 2 * (lane & 3)) =
              make_float2(s[nt][2 * h], s[nt][2 * h + 1]);
    }
    NamedBarrier(1 + g, 128);

    // ---- The sum of the row group's four partials for columns 8c.., scale, mask, row maxima.
    const unsigned valid_cols = sm.valid[t % kRing] >> s_col;
    float sv[2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float2 acc = make_float2(0.f, 0.f);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 v = *reinterpret_cast<const float2*>(&sm.s_part[g][q][s_row + 8 * h][s_col]);
        acc.x += v.x;
        acc.y += v.y;
      }
      sv[h][0] = acc.x;
      sv[h][1] = acc.y;
    }
    // With the vote (below) the row maxima are published only if it asks for them.
    const bool voting = kVoteMaxima && vote;
    float mx[2] = {NegInf(), NegInf()};  // this thread's maxima of its two scores per row (of this tile)
    auto publish_max = [&](int h) {
      const float row_mx = QuadMax(mx[h]);
      if ((lane & 3) == 0) sm.row_buf[c][warp_row0 + 8 * h + s_row] = row_mx;
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const bool valid = ((valid_cols >> j) & 1u) && ((tree_bits >> (2 * h + j)) & 1u);
        const float v = valid ? (kFp8Rows ? sv[h][j] * q_unscale[h][0] * q_unscale[h][1] : sv[h][j]) * scale : NegInf();
        sv[h][j] = v;
        mx[h] = fmaxf(mx[h], v);
      }
      if (!voting) publish_max(h);
    }

    // ---- Online softmax; P (bf16, or f16 over fp8 rows) to shared memory for the row group.
    auto store_p = [&](int h, float p0, float p1) {
      const int row = warp_row0 + 8 * h + s_row;
      unsigned char* dst = reinterpret_cast<unsigned char*>(sm.p) + SwizzledOffset<8>(row, s_col >> 3) + (s_col & 7) * 2;
      *reinterpret_cast<unsigned*>(dst) = !kFp8Rows ? PackBf16x2(p0, p1)
                                          : round_fp8 ? RoundToE4m3PairF16x2(p0, p1)
                                                      : PackF16x2(p0 * kF16PScale, p1 * kF16PScale);
    };
    // The row maxima (published) across the row group's four warps, LazyMaxUpdate, P.
    auto update_from_maxima = [&]() {
      NamedBarrier(1 + g, 128);
      float alpha_r[2];
      bool rescale = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + 8 * h + s_row;
        float tile_max = sm.row_buf[0][row];
#pragma unroll
        for (int q = 1; q < 4; ++q) tile_max = fmaxf(tile_max, sm.row_buf[q][row]);
        float alpha;
        const float m_use = LazyMaxUpdate(m_run[h], tile_max, alpha);
        alpha_r[h] = alpha;
        const float p0 = FastExp2(sv[h][0] - m_use), p1 = FastExp2(sv[h][1] - m_use);
        l_run[h] = l_run[h] * alpha + (p0 + p1);
        rescale |= alpha != 1.f;
        store_p(h, p0, p1);
      }
      if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int nt = 0; nt < kVNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[nt][e] *= alpha_r[e >> 1];
      }
      NamedBarrier(1 + g, 128);
    };
    if (voting) {
      // Where LazyMaxUpdate keeps every running max of the CTA (LazyMaxKeeps for each score: alpha
      // exactly 1), P against the running maxima is final. So P is written at once, and one barrier
      // both publishes it and votes; only if some score passes its row's max by more than the
      // update keeps (a jump in a max, a row with no finite score yet) do the maxima go across each
      // row group's four warps and P is written again, as the update decides. The same values, bit
      // for bit, either way.
      bool jumps = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) jumps |= !LazyMaxKeeps(m_run[h], mx[h]);
      float p_sum[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m_use = SafeMax(m_run[h]);
        const float p0 = FastExp2(sv[h][0] - m_use), p1 = FastExp2(sv[h][1] - m_use);
        p_sum[h] = p0 + p1;
        store_p(h, p0, p1);
      }
      // Over the CTA, so that both row groups pass the same barriers in every tile. (A vote of each
      // row group on its own named barrier, bar.red.or, measured 3-5% faster on the long shapes, but
      // compute-sanitizer's racecheck then reported WAR hazards on a KV stage between threads of the
      // two row groups, whose stage accesses the CTA barrier at each tile's top orders: a tool
      // artifact or a race, not settled. bench/results/kernel_bench-2026-12-06-h100-sm120-proxy-vote.md)
      const bool exchange = __syncthreads_or(jumps) != 0;
      if (exchange) {
#pragma unroll
        for (int h = 0; h < 2; ++h) publish_max(h);
        update_from_maxima();
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) l_run[h] += p_sum[h];
      }
    } else {
      update_from_maxima();
    }

    // ---- O += P.V over the warp's 128 V columns (V = the first 512 dims of the same tile).
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      unsigned a[4];
      LdMatrixX4(a, p_lane + (((2 * kk + (lane >> 4)) ^ (lane & 7)) << 4));
      if constexpr (kFp8Rows) {
        // Chunks 8c + 2jj and + 1: e4m3 pairs (bytes 0, 2 | 1, 3 of the two row halves) into the
        // n-tiles of their even dims (o[4jj], o[4jj + 2]) and odd dims (o[4jj + 1], o[4jj + 3]).
        auto load_v = [&](int jj, unsigned (&r)[4]) {
          LdMatrixX4Trans(r, kv_addr + v8_lane + kk * 16 * kPitch8 + jj * 32);
        };
        auto mma_v = [&](int jj, const unsigned (&r)[4]) {
#pragma unroll
          for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int odd = 0; odd < 2; ++odd) {
              const unsigned pair = __byte_perm(r[2 * half], r[2 * half + 1], odd ? 0x7531u : 0x6420u);
              if (KJIT_QREG_EXP == 2) continue;
              MmaF16(o[4 * jj + 2 * half + odd], a, E4m3x2ToF16x2(static_cast<unsigned short>(pair & 0xffffu)),
                     E4m3x2ToF16x2(static_cast<unsigned short>(pair >> 16)));
            }
        };
        unsigned w0[4], w1[4];
        load_v(0, w0);
#pragma unroll
        for (int jj = 0; jj < 4; jj += 2) {
          load_v(jj + 1, w1);
          mma_v(jj, w0);
          if (jj + 2 < 4) load_v(jj + 2, w0);
          mma_v(jj + 1, w1);
        }
      } else {
        auto load_v = [&](int np, unsigned (&bv)[4]) {
          LdMatrixX4Trans(bv, kv_addr + v_lane + kk * 16 * kRowBytes + (np / 4) * 128 + swz_v.x[np % 4]);
        };
        auto mma_v = [&](int np, const unsigned (&bv)[4]) {
          if (KJIT_QREG_EXP == 2) return;
          MmaBf16(o[2 * np], a, bv[0], bv[1]);
          MmaBf16(o[2 * np + 1], a, bv[2], bv[3]);
        };
        constexpr int kPairs = kVNTiles / 2;  // 8
        unsigned bv0[4], bv1[4];
        load_v(0, bv0);
#pragma unroll
        for (int np = 0; np < kPairs; np += 2) {
          load_v(np + 1, bv1);
          mma_v(np, bv0);
          if (np + 2 < kPairs) load_v(np + 2, bv0);
          mma_v(np + 1, bv1);
        }
      }
    }
    if (stage_next) stage_rows(t + kAhead + 1, raw_next);
  };
  if constexpr (kVoteMaxima) {
    // Tile 0 passes every running max (-inf) and exchanges at once. A loop of its own for the later
    // tiles keeps the one-tile CTAs of short prefixes on the exchange's code alone.
    run_tile(0, false);
    for (int t = 1; t < num_tiles; ++t) run_tile(t, true);
  } else {
    for (int t = 0; t < num_tiles; ++t) run_tile(t, false);
  }

  // ---- Row sums across the four warps of a row group, then the normalized partial state.
  __syncthreads();
  KJIT_STAMP(kTlLoopEnd);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = QuadSum(l_run[h]);
    if ((lane & 3) == 0) sm.row_buf[c][warp_row0 + 8 * h + s_row] = l;
  }
  __syncthreads();
  const float v_scale = tree ? 1.f : p.v_scale;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp_row0 + 8 * h + s_row;
    float l = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) l += sm.row_buf[q][row];
    if (m0 + row >= rows_b) continue;
    const float inv = l > 0.f ? (kFp8Rows && !round_fp8 ? v_scale / kF16PScale : v_scale) / l : 0.f;
    if constexpr (kFp8Rows) {  // dims 16ch + 4q..4q+3: even, odd, even, odd n-tile columns
      unsigned short* dst = state.o + static_cast<long long>(m0 + row) * kVDim + c * Cfg::kVCols + (lane & 3) * 4;
#pragma unroll
      for (int ch = 0; ch < kVNTiles / 2; ++ch)
        *reinterpret_cast<uint2*>(dst + ch * 16) =
            make_uint2(PackBf16x2(o[2 * ch][h * 2] * inv, o[2 * ch + 1][h * 2] * inv),
                       PackBf16x2(o[2 * ch][h * 2 + 1] * inv, o[2 * ch + 1][h * 2 + 1] * inv));
    } else {
      unsigned short* dst = state.o + static_cast<long long>(m0 + row) * kVDim + c * Cfg::kVCols + (lane & 3) * 2;
#pragma unroll
      for (int nt = 0; nt < kVNTiles; ++nt)
        *reinterpret_cast<unsigned*>(dst + nt * 8) = PackBf16x2(o[nt][h * 2] * inv, o[nt][h * 2 + 1] * inv);
    }
    if (c == 0 && (lane & 3) == 0) state.lse[m0 + row] = l > 0.f ? m_run[h] + __log2f(l) : NegInf();
  }
}

}  // namespace mla
}  // namespace kjit
