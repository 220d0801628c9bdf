// The split kernel on sm_90a: the same contract as split_kernel.cuh (one CTA = 64 query rows of
// request b x one prefix chunk, or the draft tree for split 0; normalized bf16 partial O and log2-LSE
// into the workspace), computed with warpgroup MMAs that read both operands from shared memory.
//
// Two warpgroups. Warpgroup 0 computes S = Q.K^T for the whole 64 x 64 tile (36 wgmma m64n64k16,
// Q and K straight from shared memory: no ldmatrix, no per-warp re-reads of Q), runs the online
// softmax with every column of its rows in its own registers (quad shuffles only), and writes P
// (bf16) and each row's rescale factor to shared memory. Then both warpgroups add P.V into their
// half of O (64 x 256 fp32 each, 128 registers per thread; 4 wgmma m64n256k16 with V N-major from
// the same tile). KV tiles stream through a 2-stage cp.async pipeline as in split_kernel.cuh.
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

template <int kHeads, bool kPackedMask>
__device__ __forceinline__ void WgmmaSplitKernelBody(const MlaVerifyParams& p) {
  using Cfg = ConfigWgmma;
  constexpr int kTile = Cfg::kKvTile;                 // 64
  constexpr int kRows = Cfg::kRows;                   // 64
  constexpr int kThreads = Cfg::kThreads;             // 256
  constexpr int kChunks = kKDim * 2 / 16;             // 72 16-byte chunks per 1152-byte row
  constexpr unsigned kGroupBytes = WgmmaSmem::kGroupBytes;  // 64 rows x 128 bytes
  constexpr unsigned kAtomBytes = 1024;               // 8 rows x 128 bytes
  static_assert(kTile == 64 && kRows == 64, "one 64 x 64 S tile per warpgroup MMA chain");

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The plan requests sizeof(WgmmaSmem) + 1024 bytes: the swizzle atoms need 1024-byte alignment.
  const unsigned raw_addr = SmemAddr(smem_raw);
  const unsigned pad = ((raw_addr + 1023u) & ~1023u) - raw_addr;
  WgmmaSmem& sm = *reinterpret_cast<WgmmaSmem*>(smem_raw + pad);
  const unsigned q_addr = SmemAddr(sm.q), p_addr = SmemAddr(sm.p);

  const int m_tile = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;

  const Request rq = LoadRequest(p, b);
  if (!rq.ok) {
    if (tid == 0 && split == 0 && m_tile == 0) RaiseError(p, kErrBadIndptr);
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
    if (!mask.ok && tid == 0) RaiseError(p, kErrBadIndptr);
  }

  const unsigned short* src_base = tree ? p.k_extend + rq.q0 * p.k_extend_stride_n : p.kv_cache;
  const long long src_stride = tree ? p.k_extend_stride_n : kKDim;
  constexpr long long kPastEnd = -0x7fffffffffffffffLL - 1;
  auto load_raw = [&](int t, int i) -> long long {
    const long long pos = kv_begin + static_cast<long long>(t) * kTile + i;
    if (pos >= kv_end) return kPastEnd;
    return tree ? pos : p.kv_indices[rq.kv0 + pos];
  };
  auto validate = [&](long long raw) -> long long {
    if (raw == kPastEnd) return -1;
    if (!tree && (raw < 0 || raw >= p.num_slots)) {
      RaiseError(p, kErrKvIndexOutOfRange);
      return -1;
    }
    return raw;
  };
  // Warp w gathers rows w, w + 8, ...: lane copies chunks lane, lane + 32, lane + 64 (< 72) of the
  // row; chunk c lands in group c / 8 at swizzled chunk (c % 8) ^ (row % 8).
  auto gather = [&](int t) {
    const long long* idx = sm.idx[t % kIdxRing];
    const unsigned dst = SmemAddr(sm.kv[t % 2]) + (lane >> 3) * kGroupBytes + (((lane & 7)) << 4);
    const char* base = reinterpret_cast<const char*>(src_base) + lane * 16;
#pragma unroll 2
    for (int row = warp; row < kTile; row += kThreads / 32) {
      const long long s = idx[row];
      const char* src = base + (s < 0 ? 0 : s) * src_stride * 2;
      const unsigned d = (dst ^ ((row & 7) << 4)) + row * 128;
      CpAsync16(d, src, s >= 0);
      CpAsync16(d + 4 * kGroupBytes, src + 512, s >= 0);
      if (lane < kChunks - 64) CpAsync16(d + 8 * kGroupBytes, src + 1024, s >= 0);
    }
  };

  if (tid < kTile) {
    sm.idx[0][tid] = validate(load_raw(0, tid));
    sm.idx[1][tid] = num_tiles > 1 ? validate(load_raw(1, tid)) : -1;
  }
  __syncthreads();
#pragma unroll
  for (int it = 0; it < kRows * kChunks / kThreads; ++it) {
    const int j = it * kThreads + tid, row = j / kChunks, c = j % kChunks;
    const int rg = m0 + row;
    const bool ok = rg < rows_b;
    const long long tok = ok ? rg / kHeads : 0;
    const unsigned short* src = p.q + (rq.q0 + tok) * p.q_stride_n + (rg % kHeads) * p.q_stride_h + c * 8;
    CpAsync16(q_addr + (c >> 3) * kGroupBytes + row * 128 + (((c & 7) ^ (row & 7)) << 4), src, ok);
  }
  gather(0);
  CpAsyncCommit();

  // This thread's accumulator rows (both warpgroups use the same rows; O columns differ).
  const int row0 = 16 * wq + (lane >> 2);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m_run[2] = {NegInf(), NegInf()}, l_run[2] = {0.f, 0.f};  // warpgroup 0's rows
  const float scale = tree ? p.tree_scale_log2 : p.prefix_scale_log2;

  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<0>();
    FenceProxyAsyncShared();  // this thread's cp.async writes, for the wgmma reads below
    __syncthreads();          // tile t complete; every warp done with tile t-1 (its stage and P)
    if (t + 1 < num_tiles) gather(t + 1);
    CpAsyncCommit();
    const bool stage_next = tid < kTile && t + 2 < num_tiles;
    const long long raw_next = stage_next ? load_raw(t + 2, tid) : kPastEnd;  // used after the tile
    const unsigned kv_addr = SmemAddr(sm.kv[t % 2]);

    if (wg == 0) {
      // ---- S = Q.K^T: 36 k-steps of 16 dims; step ks is group ks / 4, +32 bytes per step within it.
      float s[32];
      WgmmaFence();
#pragma unroll
      for (int ks = 0; ks < kKDim / 16; ++ks) {
        const unsigned off = (ks >> 2) * kGroupBytes + (ks & 3) * 32;
        WgmmaM64N64K16(s, WgmmaDesc(q_addr + off, 16, kAtomBytes), WgmmaDesc(kv_addr + off, 16, kAtomBytes), ks > 0);
      }
      WgmmaCommit();
      WgmmaWait<0>();
      WgmmaPin(s);

      // ---- Scale and mask; online softmax (lazy max as in split_kernel.cuh); P and alpha to smem.
      const long long* idx_t = sm.idx[t % kIdxRing];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        const int rg = m0 + row;
        float mx = NegInf();
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * j + 2 * (lane & 3) + e;
            bool valid = idx_t[col] >= 0;
            if (tree) valid = valid && rg < rows_b && mask.Allowed(p, rg / kHeads, t * kTile + col, rq.draft);
            const float v = valid ? s[4 * j + 2 * h + e] * scale : NegInf();
            s[4 * j + 2 * h + e] = v;
            mx = fmaxf(mx, v);
          }
        }
        mx = QuadMax(mx);
        const float m_tile = fmaxf(m_run[h], mx);
        const float m_new = m_tile - m_run[h] <= 8.f ? m_run[h] : m_tile;
        const float m_use = SafeMax(m_new);
        const float alpha = FastExp2(m_run[h] - m_use);
        m_run[h] = m_new;
        float sum = 0.f;
        unsigned char* prow = reinterpret_cast<unsigned char*>(sm.p) + row * 128 + (lane & 3) * 4;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float p0 = FastExp2(s[4 * j + 2 * h] - m_use);
          const float p1 = FastExp2(s[4 * j + 2 * h + 1] - m_use);
          sum += p0 + p1;
          *reinterpret_cast<unsigned*>(prow + ((j ^ (row & 7)) << 4)) = PackBf16x2(p0, p1);
        }
        l_run[h] = l_run[h] * alpha + sum;
        if ((lane & 3) == 0) sm.alpha[row] = alpha;
      }
      FenceProxyAsyncShared();  // P, for the wgmma reads of both warpgroups
    }
    __syncthreads();  // P and alpha of tile t visible to both warpgroups

    // ---- O = alpha * O + P.V over this warpgroup's 256 value columns (groups 4 * wg .. 4 * wg + 3).
    const float a0 = sm.alpha[row0], a1 = sm.alpha[row0 + 8];
    if (__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        o[4 * j] *= a0;
        o[4 * j + 1] *= a0;
        o[4 * j + 2] *= a1;
        o[4 * j + 3] *= a1;
      }
    }
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      WgmmaM64N256K16Nt(o, WgmmaDesc(p_addr + kk * 32, 16, kAtomBytes),
                        WgmmaDesc(kv_addr + 4 * wg * kGroupBytes + kk * 2 * kAtomBytes, kGroupBytes, kAtomBytes), true);
    }
    WgmmaCommit();
    WgmmaWait<0>();
    WgmmaPin(o);
    if (stage_next) sm.idx[(t + 2) % kIdxRing][tid] = validate(raw_next);
  }

  // ---- Row sums from warpgroup 0, then the normalized partial state.
  if (wg == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = QuadSum(l_run[h]);
      if ((lane & 3) == 0) sm.lsum[row0 + 8 * h] = l;
    }
  }
  __syncthreads();
  const float v_scale = tree ? 1.f : p.v_scale;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (m0 + row >= rows_b) continue;
    const float l = sm.lsum[row];
    const float inv = l > 0.f ? v_scale / l : 0.f;
    unsigned short* dst = part_o + static_cast<long long>(m0 + row) * kVDim + 256 * wg + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 32; ++j)
      *reinterpret_cast<unsigned*>(dst + 8 * j) = PackBf16x2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
    if (wg == 0 && (lane & 3) == 0) part_lse[m0 + row] = l > 0.f ? m_run[h] + __log2f(l) : NegInf();
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace mla
}  // namespace kjit
