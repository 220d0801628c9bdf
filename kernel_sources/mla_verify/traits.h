// Tile configurations of the split kernel and the shared-memory plan they imply. Plain C++ shared
// by host (plan: block size, dynamic smem = sizeof(SmemPlan)) and device code.
//
// A CTA owns kRows query rows of one request (row = token * H + head: heads inner, so every KV row
// it streams serves all heads of kRows / H tokens) and one prefix chunk. Warps form kRowGroups x
// kColGroups: in Q.K^T warp (g, c) computes rows of group g against KV columns c*kKvTile/kColGroups..,
// in P.V the same rows against V columns c*kVCols..; P and the row maxima cross the kColGroups warps
// of a row group through smem.
#pragma once

#if defined(__CUDACC__)
#define KJIT_MLA_HOST_DEVICE __host__ __device__
#else
#define KJIT_MLA_HOST_DEVICE
#endif

namespace kjit {
namespace mla {

constexpr int kKDim = 576;  // latent 512 + rope 64
constexpr int kVDim = 512;
constexpr int kPRowElems = 64;  // P rows are 128 bytes whatever the KV tile (<= 64 columns)
constexpr int kIdxRing = 3;    // slot-index buffers: tile t's are staged while tiles t-1 and (on
                               // sm_90a) t-2 may still be read

template <bool kCond, class A, class B>
struct Conditional {
  using type = A;
};
template <class A, class B>
struct Conditional<false, A, B> {
  using type = B;
};

template <int kMTiles_, int kRowGroups_, int kKvTile_, int kColGroups_ = 4>
struct TileConfig {
  static constexpr int kMTiles = kMTiles_;      // m16 tiles per warp
  static constexpr int kRowGroups = kRowGroups_;
  static constexpr int kColGroups = kColGroups_;  // warps sharing a row group (V column slices)
  static constexpr int kKvTile = kKvTile_;      // KV rows per pipeline stage
  static constexpr int kStages = 2;
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kRows = kWarpRows * kRowGroups;
  static constexpr int kWarps = kRowGroups * kColGroups;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kQkCols = kKvTile / kColGroups;  // KV columns per warp in Q.K^T
  static constexpr int kQkNTiles = kQkCols / 8;
  static constexpr int kVCols = kVDim / kColGroups;     // V columns per warp in P.V
  static constexpr int kVNTiles = kVCols / 8;
  static constexpr int kChunksPerRow = kKDim * 2 / 16;  // 16-byte chunks of a 1152-byte row

  static_assert(kMTiles == 1 || kMTiles == 2, "a warp holds 16 or 32 rows of its O quarter (64 or 128 fp32 registers)");
  static_assert(kQkNTiles == 1 || kQkNTiles == 2, "Q.K^T B fragments are loaded by one ldmatrix");
  static_assert(kKvTile % 16 == 0 && kKvTile <= 64, "P.V steps over 16 KV rows");
  static_assert(kThreads <= 512, "one CTA of at most 16 warps");
  static_assert(kVNTiles % 4 == 0, "P.V loads V column pairs in pairs");
  static_assert(kChunksPerRow % 8 == 0, "the XOR swizzle permutes chunks within groups of 8");
};

// sm_100 (227 KB of shared memory per block): 64 rows x 64 KV rows, 8 warps of mma.sync.
using Tile64x64 = TileConfig<2, 2, 64>;
// sm_80/sm_89/sm_120 (99 KB): 32 rows x 16 KV rows, 4 warps as 2 row groups x 2 V halves; every KV
// row streamed serves 32 query rows (a 16-row tile would stream each KV row twice as often).
using Tile32x16 = TileConfig<1, 2, 16, 2>;

// sm_80/sm_89/sm_120 with a bf16 cache (split_qreg.cuh): 32 rows x 32 KV rows, 8 warps as 2 row
// groups x 4 quarters. In Q.K^T a quarter is 9 of the 36 k-steps of 16 dims (Q's fragments held in
// registers, the partial S summed through shared memory), in P.V 128 of the 512 V columns.
struct TileQReg32x32 {
  static constexpr int kRows = 32;
  static constexpr int kKvTile = 32;
  static constexpr int kStages = 2;
  static constexpr int kStagesFp8 = 3;              // an fp8 cache's stages are half the bytes
  static constexpr int kFp8RowPitch = kKDim + 16;   // 592 bytes: 37 chunks, so the 8 rows of an
                                                    // ldmatrix fall in 8 bank groups unswizzled
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kQkSteps = kKDim / 16 / 4;  // k-steps of Q.K^T per warp
  static constexpr int kVCols = kVDim / 4;          // V columns per warp in P.V
  static constexpr int kVNTiles = kVCols / 8;
  static constexpr int kSPad = 40;                  // floats per row of a partial S (32 + 8)
};
struct SmemPlanQReg {
  alignas(128) unsigned short kv[TileQReg32x32::kStages][TileQReg32x32::kKvTile * kKDim];  // stage 1 first holds Q
  alignas(128) float s_part[2][4][16][TileQReg32x32::kSPad];  // row group, quarter: partial S of 16 rows
  alignas(128) unsigned short p[TileQReg32x32::kRows * kPRowElems];  // bf16 P, 128-byte rows (4 chunks used)
  float row_buf[4][TileQReg32x32::kRows];                              // per-quarter row maxima / sums
  long long idx[kIdxRing][TileQReg32x32::kKvTile];  // source address per KV row of a staged tile; -1 = masked
  unsigned valid[kIdxRing];                          // bit i: KV row i of that tile is valid
};
static_assert(sizeof(SmemPlanQReg) <= 101376, "the 32x32 Q-in-registers tile exceeds 99 KB");
// The same tile over an fp8 e4m3 cache (prefix CTAs; the tree CTA reads bf16 k_extend through
// SmemPlanQReg): 3 stages of 32 e4m3 rows (two tiles in flight behind the one computed; a fourth
// does not fit beside the partial S), converted to f16 in registers after each ldmatrix. Stages 1
// and 2 first hold Q (bf16, SmemPlanQReg's swizzled rows).
struct SmemPlanQRegFp8 {
  alignas(128) unsigned char kv[TileQReg32x32::kStagesFp8][TileQReg32x32::kKvTile * TileQReg32x32::kFp8RowPitch];
  alignas(128) float s_part[2][4][16][TileQReg32x32::kSPad];
  alignas(128) unsigned short p[TileQReg32x32::kRows * kPRowElems];  // f16 P, 128-byte rows
  float row_buf[4][TileQReg32x32::kRows];
  long long idx[TileQReg32x32::kStagesFp8 + 1][TileQReg32x32::kKvTile];
  unsigned valid[TileQReg32x32::kStagesFp8 + 1];
};
static_assert(sizeof(SmemPlanQRegFp8) <= sizeof(SmemPlanQReg), "the fp8 plan fits the launch's (bf16) request");
static_assert(sizeof(SmemPlanQRegFp8::idx) / sizeof(SmemPlanQRegFp8::idx[0]) == TileQReg32x32::kStagesFp8 + 1,
              "index ring: tiles t..t+kStages-1 read, t+kStages written (split_qreg.cuh's kRing)");
static_assert(2 * TileQReg32x32::kKvTile * TileQReg32x32::kFp8RowPitch >= TileQReg32x32::kRows * kKDim * 2,
              "Q (bf16) fits fp8 stages 1 and 2");
static_assert(TileQReg32x32::kRows * kKDim == TileQReg32x32::kKvTile * kKDim, "Q fits one KV stage");

// Shared memory of one CTA. Row-major tiles of 1152-byte rows with 16-byte chunks XOR-swizzled by
// (row % 8): ldmatrix's eight row addresses then hit eight different bank groups.
template <class Cfg>
struct SmemPlan {
  alignas(128) unsigned short q[Cfg::kRows * kKDim];
  alignas(128) unsigned short kv[Cfg::kStages][Cfg::kKvTile * kKDim];
  alignas(128) unsigned short p[Cfg::kRows * kPRowElems];  // bf16 P, 128-byte rows (8 chunks)
  float row_buf[Cfg::kColGroups][Cfg::kRows];                // per-warp row maxima / sums
  long long idx[kIdxRing][Cfg::kKvTile];                     // source row per KV row; -1 = masked
};

// The same with an fp8 e4m3 cache: each stage's bytes land first in a staging ring of 576-byte rows
// (cp.async), and are converted to bf16 into the stage the MMAs read (split_kernel.cuh).
template <class Cfg>
struct SmemPlanFp8 : SmemPlan<Cfg> {
  alignas(128) unsigned char kv8[Cfg::kStages][Cfg::kKvTile * kKDim];
};

constexpr int kSmemLimitLarge = 232448;  // 227 KB
constexpr int kSmemLimitSmall = 101376;  // 99 KB
static_assert(sizeof(SmemPlan<Tile64x64>) <= kSmemLimitLarge, "64x64 tile exceeds 227 KB");
static_assert(sizeof(SmemPlan<Tile32x16>) <= kSmemLimitSmall, "32x16 tile exceeds 99 KB");
static_assert(sizeof(SmemPlanFp8<Tile32x16>) <= kSmemLimitSmall, "32x16 tile with an fp8 cache exceeds 99 KB");
// The 64x64 mma.sync tile has no fp8 variant: its bf16 stages leave no room for the staging ring.
template <class Cfg>
constexpr bool kHasFp8Variant = sizeof(SmemPlanFp8<Cfg>) <= (Cfg::kRows >= 64 ? kSmemLimitLarge : kSmemLimitSmall);

// The sm_90a tile (split_wgmma.cuh): 64 query rows x 64 KV rows; warpgroups 0 and 1 compute
// ("seesaw": each takes Q.K^T and the softmax of every other tile and adds every tile's P.V into its
// half of O), warpgroup 2 stages indices and gathers. The launch gives each thread 168 registers
// (64,512 per CTA); the producer hands 112 of its own back and each consumer takes 56 more (with an
// fp8 cache 48 and 24). Its
// shared-memory plan is WgmmaSmem.
struct TileWgmma64x64 {
  static constexpr int kRows = 64;
  static constexpr int kHalfRows = kRows / 2;  // a CTA's rows under kHalfTileBit (params.h)
  static constexpr int kKvTile = 64;
  static constexpr int kThreads = 384;
  // KJIT_WGMMA_REGS_BF16 / _FP8 = producer * 1000 + consumer registers (experiments only, kernel_bench
  // --define; multiples of 8 within the static_asserts below).
#ifdef KJIT_WGMMA_REGS_BF16
  static constexpr int kProducerRegs = KJIT_WGMMA_REGS_BF16 / 1000, kConsumerRegs = KJIT_WGMMA_REGS_BF16 % 1000;
#else
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 224;
#endif
  // With an fp8 cache the producer holds a whole tile's bytes in registers (split_wgmma.cuh
  // Fp8TileRows: 72 of them); the consumers give up 32 each (ptxas reports no spills at 192; at
  // 104 / 200 the producer of the H64 and H128 packed kernels spilled).
#ifdef KJIT_WGMMA_REGS_FP8
  static constexpr int kProducerRegsFp8 = KJIT_WGMMA_REGS_FP8 / 1000, kConsumerRegsFp8 = KJIT_WGMMA_REGS_FP8 % 1000;
#else
  static constexpr int kProducerRegsFp8 = 120;
  static constexpr int kConsumerRegsFp8 = 192;
#endif
  // fp8 numerics on e4m3 MMAs (split_wgmma_fp8.cuh): the producer's transposing warps hold 16
  // chunks of 16 bytes.
  static constexpr int kProducerRegsFp8Mma = 104;
  static constexpr int kConsumerRegsFp8Mma = 200;
  static_assert(128 * (kProducerRegsFp8Mma + 2 * kConsumerRegsFp8Mma) <= 65536 / kThreads / 8 * 8 * kThreads,
                "the warpgroups' registers fit what the launch allots the CTA");
  static_assert(128 * (kProducerRegs + 2 * kConsumerRegs) <= 65536 / kThreads / 8 * 8 * kThreads,
                "the warpgroups' registers fit what the launch allots the CTA");
  static_assert(128 * (kProducerRegsFp8 + 2 * kConsumerRegsFp8) <= 65536 / kThreads / 8 * 8 * kThreads,
                "the warpgroups' registers fit what the launch allots the CTA");
};

// Shared memory of the sm_90a split kernel: 128-byte-swizzled groups of 64 rows x 64 bf16
// (common/wgmma.cuh); the kernel places it at a 1024-byte boundary itself (every group offset is a
// multiple of 8 KB). Q and each KV stage are 9 groups (dims 0-63 ... 512-575). A tile's P (64 query
// rows x 64 KV rows, one group) goes into its stage's last group (the rope dims, read only by
// Q.K^T) once Q.K^T of the tile is done.
struct WgmmaSmem {
  static constexpr unsigned kGroupBytes = 64 * 128;
  unsigned short q[9 * 64 * 64];
  unsigned short kv[2][9 * 64 * 64];
  float alpha[2][64];                 // per tile parity: each row's rescale of O and of the row sum
  float row_max[2][64];               // per tile parity: each row's running max after the tile
  float row_sums[2][64];              // each consumer warpgroup's row sums (the epilogue)
  long long idx[kIdxRing][64];        // source address per KV row of a staged tile; -1 = masked
  unsigned valid[kIdxRing][2];        // bit i of word w: KV row 32w + i of that tile is valid
  unsigned tree_bits[64][2];          // the tree CTA's one tile (D <= 64): each query row's mask bits
  unsigned long long bar_q;           // mbarriers: Q landed;
  unsigned long long full[2][2];      // stage s, part h landed (groups 0-3 and 8 | groups 4-7);
  unsigned long long empty[2];        // stage s no longer read (both consumer warpgroups);
  unsigned long long p_ready[2];      // tile parity: P, alpha and row_max of the tile written
};
// The kernel aligns its dynamic shared memory to 1024 bytes itself, so it asks for that much more
// (its static shared memory, the CTA's error word, comes first in the same 227 KB).
constexpr int kWgmmaSmemBytes = static_cast<int>(sizeof(WgmmaSmem)) + 1024;
static_assert(kWgmmaSmemBytes <= kSmemLimitLarge, "sm_90a tile exceeds 227 KB");

// The sm_90a split kernel's prefix CTAs over an fp8 e4m3 cache with fp8 numerics
// (split_wgmma_fp8.cuh): both products on e4m3 warpgroup MMAs, whose operands must be K-major. Q (in
// e4m3) and each stage's cache rows are 128-byte-swizzled groups of 64 rows x 128 bytes (group 4
// holds dims 512-575 in the first 64 bytes of each row; the tile's P, 64 x 64 e4m3, goes into the
// other 64 once its Q.K^T is done). V is read by P.V as its transpose: vt holds 512 value dims x 128
// bytes, tile t's 64 tokens in bytes 64 * (t % 2) ... of each row, written by the producer from the
// stage. The launch asks for kWgmmaSmemBytes (the tree CTA runs the bf16 plan above).
struct WgmmaFp8Smem {
  static constexpr unsigned kGroupBytes = 64 * 128;
  static constexpr int kGroups = 5;
  unsigned char q[kGroups * kGroupBytes];
  unsigned char kv[2][kGroups * kGroupBytes];
  unsigned char vt[kVDim * 128];
  float alpha[2][64];
  float row_max[2][64];
  float row_sums[2][64];
  long long idx[kIdxRing][64];
  unsigned valid[kIdxRing][2];
  unsigned long long full[2];     // stage s: the cache rows landed (and the tile's valid bits)
  unsigned long long vt_full[2];  // tile parity: V^T written
  unsigned long long empty[2];    // stage s (and its half of vt) no longer read
  unsigned long long p_ready[2];  // tile parity: P, alpha and row_max written
};
static_assert(sizeof(WgmmaFp8Smem) + 1024 <= kWgmmaSmemBytes, "the fp8 MMA plan fits the launch's request");

// Which tile an arch compiles and the host plans for: the same functions on both sides. sm_90
// (compiled as sm_90a) runs the warpgroup-MMA tile; sm_100 the 64 x 64 mma.sync tile; sm_120 the
// 32 x 32 Q-in-registers tile for both cache types (bf16: 0.61-0.86x the 32 x 16 tile's time on every
// shape of the sm_120 proxy, bench/results/kernel_bench-2026-12-05-h200-sm120-proxy-qreg.md; fp8:
// about half of it, bench/results/kernel_bench-2026-12-06-h100-sm120-proxy-fp8.md); the other 99 KB
// arches (sm_80, sm_86, sm_89) the 32 x 16 tile.
KJIT_MLA_HOST_DEVICE constexpr bool UsesWgmmaTile(int cc_major) { return cc_major == 9; }
KJIT_MLA_HOST_DEVICE constexpr bool UsesLargeTile(int cc_major) { return cc_major == 10; }
KJIT_MLA_HOST_DEVICE constexpr bool UsesQRegTile(int cc_major) { return cc_major == 12; }

// Tiles a caller may force on any arch whose limits they fit (benchmarks and tests: the sm_120 tile
// and the mma.sync 64 x 64 tile measured on an sm_90 device). kTileArch = the arch's own tile.
enum TileId : int { kTileArch = 0, kTile32x16 = 1, kTile64x64 = 2, kTileQReg32x32 = 3 };
constexpr int kNumTileIds = 4;
// The mma.sync tile that kTileArch means off sm_90a (where it means the warpgroup tile), for both
// cache types; a forced tile is itself.
KJIT_MLA_HOST_DEVICE constexpr int ResolvedTile(int tile, int cc_major) {
  return tile != kTileArch         ? tile
         : UsesQRegTile(cc_major)  ? kTileQReg32x32
         : UsesLargeTile(cc_major) ? kTile64x64
                                   : kTile32x16;
}

// Combine: CTAs of kCombineThreads threads, each thread 8 output columns of one query row (one
// 16-byte load of bf16 partial O per state), kCombineBatch states per memory round trip. Two
// layouts; the plan picks one per launch (MlaVerifyParams::combine_row_parts, encoded below):
// - Narrow (up to kCombineOneSliceMaxStates states): a CTA serves kCombineRowsPerCta rows,
//   one slice of 64 threads each, which merges all of its row's states. Launches with many rows (64
//   heads or batches) stay about one wave: a CTA's 512 threads at ~86 registers leave no room for a
//   second on an SM.
// - Wide (parts 1 or 2): a row is served by `parts` CTAs, each covering 512 / parts columns with
//   8 * parts slices of 64 / parts threads. Slice k takes states k, k + 8 * parts, ...; the slices are
//   merged in slice order, bitwise deterministic. Needed past kCombineOneSliceMaxStates states, and
//   faster for launches with few rows (a short prefix: 128 rows over 17 states read by 16 narrow
//   CTAs took ~3 us, bench/results/kernel_bench-2026-12-02-h200-short.md).
// (Four slice counts per row as template parameters, 71 KB of combine code, measured 1-1.5 us
// slower on the H200: every SM fetches the combine's instructions cold on every launch. The three
// layouts here, 37 KB, measured no slower than the two before them, 24 KB. Batches of 16 states were
// slower than 8, as were batches of 4. Batches of 9: a request's states are num_splits + 1, and with
// 8 or 64 splits a batch of 8 left one state per slice for a second round trip.)
constexpr int kCombineThreads = 512;
constexpr int kCombineRowsPerCta = 8;
constexpr int kCombineMaxRowParts = 2;
constexpr int kCombineMaxSlices = 8 * kCombineMaxRowParts;
constexpr int kCombineBatch = 9;
constexpr int kCombineMaxStates = 1024;  // num_splits + 1 (the plan enforces it)
constexpr int kCombineOneSliceMaxStates = 32;

// Whether `states` per row need the wide layout.
KJIT_MLA_HOST_DEVICE constexpr bool CombineWide(int states) { return states > kCombineOneSliceMaxStates; }
// MlaVerifyParams::combine_row_parts, the layout as the launch encodes it. 1 or 2: that many CTAs
// per row when the combine must be wide (past kCombineOneSliceMaxStates states), narrow otherwise:
// the encoding of every plan before the plan chose the layout, kept so that an older client's
// plan, launched on these kernels (in-process clients plan for the daemon's cubins), still reads
// right. -1 or -2: wide with 1 or 2 CTAs per row whatever the states (a kernel before this
// encoding takes them as narrow, which its grid of more CTAs than rows / 8 also serves).
KJIT_MLA_HOST_DEVICE constexpr bool CombineIsWide(int row_parts, int states) {
  return row_parts < 0 || CombineWide(states);
}
KJIT_MLA_HOST_DEVICE constexpr int CombinePartsOf(int row_parts) { return row_parts < 0 ? -row_parts : row_parts; }
// The encoding of a layout: parts 0 (narrow, states <= kCombineOneSliceMaxStates) or 1, 2 per row.
KJIT_MLA_HOST_DEVICE constexpr int CombineRowPartsFor(int parts, int states) {
  return parts == 0 ? 1 : CombineWide(states) ? parts : -parts;
}
// The combine's CTAs per request (its grid's x) for rows_cap rows.
KJIT_MLA_HOST_DEVICE constexpr unsigned CombineCtasPerRequest(unsigned rows_cap, int row_parts, int states) {
  return CombineIsWide(row_parts, states) ? rows_cap * static_cast<unsigned>(CombinePartsOf(row_parts))
                                          : (rows_cap + kCombineRowsPerCta - 1) / kCombineRowsPerCta;
}

}  // namespace mla
}  // namespace kjit
