// The split kernel on sm_90a: the same contract as split_kernel.cuh (one CTA = 64 query rows of
// request b x one prefix chunk, or the draft tree for split 0; normalized bf16 partial O and log2-LSE
// into the workspace), computed with warpgroup MMAs that read both operands from shared memory.
//
// Two warpgroups with their own jobs, handing tiles over through named barriers:
// - warpgroup 0 computes S = Q.K^T for the whole 64 x 64 tile (36 wgmma m64n64k16, Q and K straight
//   from shared memory: no ldmatrix, no per-warp re-reads of Q), runs the online softmax with every
//   column of its rows in its own registers (quad shuffles only), writes P (bf16) and each row's
//   rescale factor, then adds P.V into O's first 256 columns. It issues the next tile's Q.K^T right
//   behind its P.V, so the tensor cores go from one to the other without waiting for the softmax.
// - warpgroup 1 gathers the KV tiles (2-stage cp.async ring) and stages the slot indices, and adds
//   P.V into O's last 256 columns while warpgroup 0 moves on.
// Each warpgroup holds its half of O (64 x 256 fp32, 128 registers per thread).
//
// Shared-memory tiles are 128-byte-swizzled "groups" of 64 rows x 64 bf16 (wgmma.cuh): Q and each
// KV stage hold 9 groups (dims 0-63, ..., 512-575) of 8 KB; P is one group (64 rows x 64 KV rows).
#pragma once

#include "common/bf16.cuh"
#include "common/cp_async.cuh"
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

// Copies the 64 rows of a 9-group tile at shared address `tile` (1024-aligned) with the 16-byte
// cp.async of one warp per row: the calling warp takes rows first, first + step, ...; lane copies
// chunks lane, lane + 32, lane + 64 (< 72) of the 1152-byte row, and chunk c lands in group c / 8 at
// chunk (c % 8) ^ (row % 8). row_src(row, &ok) is the row's first byte, read only when ok.
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

template <int kHeads, bool kPackedMask>
__device__ __forceinline__ void WgmmaSplitKernelBody(const MlaVerifyParams& p) {
  using Cfg = ConfigWgmma;
  constexpr int kTile = Cfg::kKvTile;                 // 64
  constexpr int kRows = Cfg::kRows;                   // 64
  constexpr int kThreads = Cfg::kThreads;             // 256
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
  auto load_raw = [&](int t, int i) { return kv_rows.Raw(p, t, i); };
  auto validate = [&](long long raw) { return kv_rows.Validate(p, raw); };
  // Tile t's source rows into ring slot t % 3, by the 64 threads of two whole warps (index i).
  auto stage = [&](int t, int i, long long raw) {
    const long long v = validate(raw);
    sm.idx[t % kIdxRing][i] = v;
    const unsigned bits = __ballot_sync(0xffffffffu, v >= 0);
    if ((i & 31) == 0) sm.valid[t % kIdxRing][i >> 5] = bits;
  };
  auto gather = [&](int t, int w0, int nw) {
    const long long* idx = sm.idx[t % kIdxRing];
    const char* base = reinterpret_cast<const char*>(kv_rows.base);
    CopyTileRows(SmemAddr(sm.kv[t % 2]), warp - w0, nw, lane, [&](int row, bool* ok) {
      const long long s = idx[row];
      *ok = s >= 0;
      return base + (s < 0 ? 0 : s) * kv_rows.stride * 2;
    });
  };

  // ---- Prologue: Q by every warp (it needs no indices, so it is in flight while they are read);
  // the indices of tiles 0 and 1; tile 0 by every warp, tile 1 by warpgroup 1.
  CopyTileRows(q_addr, warp, kThreads / 32, lane, [&](int row, bool* ok) {
    const int rg = m0 + row;
    *ok = rg < rows_b;
    const long long tok = *ok ? rg / kHeads : 0;
    return reinterpret_cast<const char*>(p.q + (rq.q0 + tok) * p.q_stride_n + (rg % kHeads) * p.q_stride_h);
  });
  if (tid < kTile) {
    stage(0, tid, load_raw(0, tid));
    stage(1, tid, num_tiles > 1 ? load_raw(1, tid) : kPastEnd);
  }
  __syncthreads();
  gather(0, 0, kThreads / 32);
  CpAsyncCommit();
  if (wg == 1) {
    if (num_tiles > 1) gather(1, 4, 4);
    CpAsyncCommit();
    CpAsyncWait<1>();
  } else {
    CpAsyncWait<0>();
  }
  FenceProxyAsyncShared();  // this thread's cp.async writes, for the wgmma reads
  __syncthreads();          // Q and tile 0 complete

  // Named barriers (bar.sync by the waiting warpgroup, bar.arrive by the other; 256 threads each).
  constexpr int kBarFull = 1;     // tile t+1 landed in its stage (1 -> 0)
  constexpr int kBarPReady = 2;   // P and alpha of tile t written (0 -> 1)
  constexpr int kBarPv1Done = 3;  // warpgroup 1 done reading P, alpha and the stage of tile t (1 -> 0)
  constexpr int kBarPv0Done = 4;  // warpgroup 0 done with the stage of tile t (0 -> 1)

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
    // S = Q.K^T of tile t: 36 k-steps of 16 dims; step ks is group ks / 4, +32 bytes within it.
    auto issue_qk = [&](int t) {
      const unsigned long long qd = Opaque(WgmmaDesc(q_addr, 16, kAtomBytes));
      const unsigned long long kd = WgmmaDesc(SmemAddr(sm.kv[t % 2]), 16, kAtomBytes);
#pragma unroll
      for (int ks = 0; ks < kKDim / 16; ++ks) {
        const unsigned off = (ks >> 2) * kGroupBytes + (ks & 3) * 32;
        WgmmaM64N64K16(s, WgmmaDescAdvance(qd, off), WgmmaDescAdvance(kd, off), ks > 0);
      }
      WgmmaCommit();
    };
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
      if (t > 0) NamedBarrier(kBarPv1Done, kThreads);
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
      NamedBarrierArrive(kBarPReady, kThreads);
      // ---- O0 += P.V, and right behind it the next tile's Q.K^T.
      rescale_o(alpha[0], alpha[1]);
      issue_pv(SmemAddr(sm.kv[t % 2]));
      // kBarPv0Done only while a tile t+2 is to be gathered into this stage (the same condition on
      // both sides; and warpgroup 0 reaches it only after kBarFull, i.e. after warpgroup 1 has waited
      // on the previous one, so two phases of the barrier never mix).
      if (t + 1 < num_tiles) {
        NamedBarrier(kBarFull, kThreads);
        issue_qk(t + 1);
        WgmmaWait<1>();
        WgmmaPin(o);
        if (t + 2 < num_tiles) NamedBarrierArrive(kBarPv0Done, kThreads);
        WgmmaWait<0>();
        WgmmaPin(s);
      } else {
        WgmmaWait<0>();
        WgmmaPin(o);
      }
    }
    NamedBarrier(kBarPv1Done, kThreads);  // the last tile's: warpgroup 1 is done with alpha and P
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = QuadSum(l_run[h]);
      if ((lane & 3) == 0) row_sums[row0 + 8 * h] = l;
    }
  } else {
    const int li = tid - 128;  // warps 4 and 5 stage the indices of tile t+2
    for (int t = 0; t < num_tiles; ++t) {
      const bool has_next = t + 1 < num_tiles, has_next2 = t + 2 < num_tiles;
      const long long raw = li < kTile && has_next2 ? load_raw(t + 2, li) : kPastEnd;  // used after P.V
      NamedBarrier(kBarPReady, kThreads);
      if (has_next) {  // tile t+1 was gathered a whole tile ago
        CpAsyncWait<0>();
        FenceProxyAsyncShared();
        NamedBarrierArrive(kBarFull, kThreads);
      }
      rescale_o(sm.alpha[row0], sm.alpha[row0 + 8]);
      issue_pv(SmemAddr(sm.kv[t % 2]));
      WgmmaWait<0>();
      WgmmaPin(o);
      // Warpgroup 0 overwrites alpha and P once this arrives: bar.arrive orders this thread's
      // earlier reads before the barrier completes (PTX ISA, barrier{.cta}).
      NamedBarrierArrive(kBarPv1Done, kThreads);
      if (has_next2) {
        if (li < kTile) stage(t + 2, li, raw);
        NamedBarrier(kBarPv0Done, kThreads);  // warpgroup 0 is done with tile t's stage
        gather(t + 2, 4, 4);
        CpAsyncCommit();
      }
    }
    CpAsyncWait<0>();  // nothing is pending by now; waiting says so to the sanitizers
  }
  __syncthreads();  // row sums visible; every wgmma has completed (KV stages free for staging O)

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
  __syncthreads();
  const int rows = rows_b - m0 < kRows ? rows_b - m0 : kRows;
  uint4* out = reinterpret_cast<uint4*>(part_o + static_cast<long long>(m0) * kVDim);
  for (int i = tid; i < rows * 64; i += kThreads) {
    const int row = i >> 6, chunk = i & 63;
    out[i] = *reinterpret_cast<const uint4*>(stage_o + row * 1024 + ((chunk ^ (row & 7)) << 4));
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace mla
}  // namespace kjit
