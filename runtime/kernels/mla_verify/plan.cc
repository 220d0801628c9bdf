#include "runtime/kernels/mla_verify/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernel_sources/mla_verify/traits.h"

namespace kjit::kernels {
namespace {

constexpr size_t kWorkspaceAlign = 256;
// One 64x64 tile of the sm_90a (warpgroup MMA) split kernel, as the split model assumes it: the
// H200 measures ~3 us per tile for H8 D16 at 64 splits (bench/results/kernel_bench-2026-11-29-h200-wgmma.md).
// Against the earlier 1.6 us it changes one KERNEL.md choice: P = 4k takes 64 splits instead of 32,
// measured 17.6 vs 18.5 us in one run (bench/results/kernel_bench-2026-11-29-h200-fixed-cost.md).
constexpr double kWgmmaTileMicros = 3.0;

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// a * b without overflow, or false.
bool MulOk(size_t a, size_t b, size_t* out) {
  if (a != 0 && b > std::numeric_limits<size_t>::max() / a) return false;
  *out = a * b;
  return true;
}

Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("mla_verify plan: ", what));
}

Status ValidateOptions(const MlaVerifyPlanOptions& o) {
  if (o.num_splits < 0 || o.num_splits >= mla::kCombineMaxStates)
    return Invalid(absl::StrCat("num_splits = ", o.num_splits, "; need 0..", mla::kCombineMaxStates - 1));
  if (o.tile < 0 || o.tile >= mla::kNumTileIds)
    return Invalid(absl::StrCat("tile = ", o.tile, "; need 0 (the device's tile), 1 (32x16), 2 (64x64 mma.sync) or 3 (32x32, Q in registers)"));
  return absl::OkStatus();
}

// What the kernels accept, max_draft and max_prefix aside (they are bounds, set later).
Status CheckLimits(const MlaVerifyProblem& p) {
  const int h = p.num_heads;
  if (h != 8 && h != 16 && h != 32 && h != 64 && h != 128)
    return Invalid(absl::StrCat("num_heads = ", h, "; use 8, 16, 32, 64 or 128 heads per rank"));
  if (p.batch < 1 || p.batch > kMlaMaxBatch)
    return Invalid(absl::StrCat("batch = ", p.batch, "; need 1 <= batch <= ", kMlaMaxBatch));
  if (p.num_q < 0 || p.num_q > std::numeric_limits<int32_t>::max())
    return Invalid(absl::StrCat("num_q = ", p.num_q, "; need 0 <= num_q < 2^31 (int32 qo_indptr)"));
  // An empty kv_cache is valid: every kv_indices entry is then out of range (masked and reported).
  if (p.num_slots < 0 || p.num_kv_indices < 0 || p.mask_len < 0)
    return Invalid("num_slots, num_kv_indices and mask_len must be >= 0");
  if (p.mask_kind != MaskKind::kBool && p.mask_kind != MaskKind::kPacked)
    return Invalid("mask_kind must be kBool or kPacked");
  if (p.kv_dtype != KvDtype::kBf16 && p.kv_dtype != KvDtype::kFp8E4m3)
    return Invalid("kv_dtype must be kBf16 or kFp8E4m3");
  if (p.fp8_numerics != Fp8Numerics::kDequant && p.fp8_numerics != Fp8Numerics::kFp8)
    return Invalid("fp8_numerics must be kDequant or kFp8");
  // 16-byte cp.async rows: q and k_extend strides in multiples of 8 bf16.
  if (p.q_stride_h < kMlaKDim || p.q_stride_h % 8 != 0)
    return Invalid(absl::StrCat("q_stride_h = ", p.q_stride_h, "; need a multiple of 8, >= 576"));
  if (p.q_stride_n % 8 != 0 || p.q_stride_n < (h - 1) * p.q_stride_h + kMlaKDim)
    return Invalid(absl::StrCat("q_stride_n = ", p.q_stride_n, "; need a multiple of 8, >= ",
                                (h - 1) * p.q_stride_h + kMlaKDim, " ((H-1)*q_stride_h + 576)"));
  if (p.k_extend_stride_n < kMlaKDim || p.k_extend_stride_n % 8 != 0)
    return Invalid(absl::StrCat("k_extend_stride_n = ", p.k_extend_stride_n, "; need a multiple of 8, >= 576"));
  if (p.check_v_extend && (p.v_extend_stride_n < kMlaVDim || p.v_extend_stride_n % 8 != 0))
    return Invalid(absl::StrCat("v_extend_stride_n = ", p.v_extend_stride_n, "; need a multiple of 8, >= 512"));
  // 8-byte stores of four bf16 outputs.
  if (p.o_stride_h < kMlaVDim || p.o_stride_h % 4 != 0)
    return Invalid(absl::StrCat("o_stride_h = ", p.o_stride_h, "; need a multiple of 4, >= 512"));
  if (p.o_stride_n % 4 != 0 || p.o_stride_n < (h - 1) * p.o_stride_h + kMlaVDim)
    return Invalid(absl::StrCat("o_stride_n = ", p.o_stride_n, "; need a multiple of 4, >= ",
                                (h - 1) * p.o_stride_h + kMlaVDim, " ((H-1)*o_stride_h + 512)"));
  return absl::OkStatus();
}

Status ValidateProblem(const MlaVerifyProblem& p) {
  KJIT_RETURN_IF_ERROR(CheckLimits(p));
  if (p.max_draft < 1 || p.max_draft > kMlaMaxDraft)
    return Invalid(absl::StrCat("max_draft = ", p.max_draft, "; need 1 <= max_draft <= ", kMlaMaxDraft));
  if (p.max_prefix < 0) return Invalid("max_prefix must be >= 0");
  return absl::OkStatus();
}

int ChooseSplits(const MlaVerifyProblem& p, const driver::DeviceInfo& dev, const MlaVerifyTile& tile) {
  const long m_tiles = (static_cast<long>(p.max_draft) * p.num_heads + tile.rows - 1) / tile.rows;
  const long ctas_per_split = m_tiles * p.batch;
  // Unknown: a typical verify prefix. A hint past 2^40 tokens (more than any cache holds) counts as
  // 2^40, which keeps the model's arithmetic in range.
  const long prefix = p.max_prefix > 0 ? std::min<int64_t>(p.max_prefix, int64_t{1} << 40) : 16384;
  const long prefix_tiles = std::max<long>(1, (prefix + tile.kv_tile - 1) / tile.kv_tile);
  const long tree_tiles = (p.max_draft + tile.kv_tile - 1) / tile.kv_tile;
  // CTA slots: SMs times the CTAs that one SM holds: as many as its shared memory fits (a 99 KB tile
  // forced on a 227 KB device could run two per SM), and as its 64K registers allow at the 255 per
  // thread that __launch_bounds__(threads, 1) permits (two CTAs of 128 threads, one of 256).
  const int by_smem = dev.max_smem_per_block_optin / std::max(1, tile.smem_bytes);
  const int by_regs = 65536 / (std::max(1, tile.threads) * 256);
  const int per_sm = std::max(1, std::min(by_smem, by_regs));
  const int sms = std::max(1, dev.sm_count) * per_sm;
  // Combine traffic per extra state: the split kernel writes and the combine reads every row's
  // 1 KB bf16 partial O; measured on the H200 as ~3.7 bytes per ns (mostly L2-resident).
  const double state_bytes = 2.0 * p.batch * static_cast<double>(p.max_draft) * p.num_heads * kMlaVDim * 2;
  const double state_tiles = state_bytes / 3.7e3 / tile.tile_us / 1e3;
  const long max_splits = std::min<long>({prefix_tiles, std::max<long>(1, 4L * sms / ctas_per_split),
                                         mla::kCombineMaxStates - 1});
  int best = 1;
  double best_t = std::numeric_limits<double>::max();
  for (long s = 1; s <= max_splits; ++s) {
    const long per = (prefix_tiles + s - 1) / s;
    if (s > 1 && (prefix_tiles + per - 1) / per < s) continue;  // same chunks as a smaller s
    const double t = internal::MlaVerifyMakespanTiles(sms, ctas_per_split, prefix_tiles, tree_tiles,
                                                      static_cast<int>(s), state_tiles);
    if (t < best_t * 0.999) {
      best_t = t;
      best = static_cast<int>(s);
    }
  }
  return best;
}

// ChooseSplits is a pure function of these; a launch sequence repeats a few problems (every layer
// of a decode step plans the same one), so each thread keeps the last few answers.
int CachedSplits(const MlaVerifyProblem& p, const driver::DeviceInfo& dev, const MlaVerifyTile& tile) {
  struct Key {
    int batch, heads, max_draft, rows, kv_tile, smem, sm_count, smem_optin;
    int64_t max_prefix;
    double tile_us;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    int splits;
  };
  constexpr int kEntries = 8;
  thread_local Entry cache[kEntries];
  thread_local int used = 0, next = 0;
  const Key key{p.batch, p.num_heads, p.max_draft, tile.rows, tile.kv_tile, tile.smem_bytes, dev.sm_count,
                dev.max_smem_per_block_optin, p.max_prefix, tile.tile_us};
  for (int i = 0; i < used; ++i) {
    if (cache[i].key == key) return cache[i].splits;
  }
  const int splits = ChooseSplits(p, dev, tile);
  cache[next] = {key, splits};
  next = (next + 1) % kEntries;
  used = std::min(used + 1, kEntries);
  return splits;
}

}  // namespace

Status CheckMlaVerifyLimits(const MlaVerifyProblem& p) { return CheckLimits(p); }

namespace internal {

// Greedy list scheduling of equal-length jobs has a closed form, so the plan (on every ModelInfer,
// under the GPU's lock) costs O(log) per candidate split count instead of a heap simulation of
// every CTA. Times are counted in half tiles (every length is an integer + kFixed = 1.5), so the
// arithmetic is exact.
double MlaVerifyMakespanTiles(int slots, long ctas_per_split, long prefix_tiles, long tree_tiles, int splits,
                              double state_tiles) {
  constexpr long kFixedHalves = 3;  // Q load + partial-state write: 1.5 tile times
  const long s = std::max(1, slots);
  // The launch order (mla_verify/request.cuh): every prefix CTA, then the tree CTAs.
  const long a = 2 * ((prefix_tiles + splits - 1) / splits) + kFixedHalves;  // a prefix CTA
  const long b = 2 * tree_tiles + kFixedHalves;                               // a tree CTA
  const long n1 = ctas_per_split * splits, n2 = ctas_per_split;
  // Prefix CTAs first, all slots free at 0: every slot runs q of them, r slots one more.
  const long q = n1 / s, r = n1 % s;
  long end = n1 > 0 ? (q + (r > 0 ? 1 : 0)) * a : 0;
  if (n2 > 0) {
    // Slots free at lo (s - r of them) and hi (r of them); tree CTA k starts at the k-th smallest
    // of {lo + j b} and {hi + j b} (each value once per slot): find the n2-th.
    const long lo = q * a, hi = (q + 1) * a;
    auto started_by = [&](long t) {  // CTAs that have started at or before time t
      long c = t >= lo ? (s - r) * ((t - lo) / b + 1) : 0;
      if (r > 0 && t >= hi) c += r * ((t - hi) / b + 1);
      return c;
    };
    auto first_start = [&](long base) {  // smallest base + j b by which n2 CTAs have started
      long lo_j = 0, hi_j = n2;
      while (lo_j < hi_j) {
        const long mid = (lo_j + hi_j) / 2;
        if (started_by(base + mid * b) >= n2) hi_j = mid; else lo_j = mid + 1;
      }
      return base + lo_j * b;
    };
    long last = first_start(lo);
    if (r > 0) last = std::min(last, first_start(hi));
    end = std::max(end, last + b);
  }
  return static_cast<double>(end) / 2 + state_tiles * (splits + 1);
}

// The combine's time per layout, modelled as waves of one CTA per SM (512 threads at ~86
// registers), each paying a fixed latency plus its CTA's bytes of partial state (1 KB per row and
// state) at a per-SM rate. The two constants are fitted to H8 D16 P1k on the H200 (16 splits:
// one CTA per row against narrow saved 1.3 us at batch 1 and lost 0.5 us at batch 2, where it
// takes two waves; bench/results/kernel_bench-2026-12-02-h200-short.md). The model keeps the
// layouts measured best before (narrow for H64 and batches, one or two CTAs per row past 32
// states) and takes one CTA per row for few rows over few states.
int MlaVerifyCombineParts(long long batch, unsigned rows_cap, int states, int sms) {
  constexpr double kLatencyUs = 1.6, kUsPerKb = 1.0 / 92.0;
  const long long slots = std::max(1, sms);
  auto model_us = [&](int parts) {
    const long long ctas = batch * mla::CombineCtasPerRequest(rows_cap, mla::CombineRowPartsFor(parts, states), states);
    const double kb = parts == 0 ? static_cast<double>(mla::kCombineRowsPerCta) * states
                                 : static_cast<double>(states) / parts;
    return static_cast<double>((ctas + slots - 1) / slots) * (kLatencyUs + kb * kUsPerKb);
  };
  int best = mla::CombineWide(states) ? 1 : 0;
  double best_us = model_us(best);
  for (int parts = best + 1; parts <= mla::kCombineMaxRowParts; ++parts) {
    const double t = model_us(parts);
    if (t < best_us * 0.999) {
      best = parts;
      best_us = t;
    }
  }
  return best;
}

}  // namespace internal

std::string MlaVerifySpecializationName(int num_heads, MaskKind mask, int tile, KvDtype kv) {
  std::string name = absl::StrCat("h", num_heads, mask == MaskKind::kPacked ? "_packed" : "_bool",
                                  kv == KvDtype::kFp8E4m3 ? "_fp8" : "");
  if (tile > 0) {
    const MlaVerifyTile t = MlaVerifyTileFor(0, tile);
    absl::StrAppend(&name, "_t", t.rows, "x", t.kv_tile);
  }
  return name;
}

std::string MlaVerifySplitExpression(int num_heads, MaskKind mask, int tile, KvDtype kv, bool fp8_mma) {
  const int m = mask == MaskKind::kPacked ? 1 : 0;
  if (kv == KvDtype::kFp8E4m3)
    return absl::StrCat("kjit::mla::MlaVerifySplit<", num_heads, ", ", m, ", ", tile, fp8_mma ? ", 2>" : ", 1>");
  if (tile > 0) return absl::StrCat("kjit::mla::MlaVerifySplit<", num_heads, ", ", m, ", ", tile, ">");
  return absl::StrCat("kjit::mla::MlaVerifySplit<", num_heads, ", ", m, ">");
}

std::string MlaVerifyCombineExpression(int num_heads) {
  return absl::StrCat("kjit::mla::MlaVerifyCombine<", num_heads, ">");
}

MlaVerifyTile MlaVerifyTileFor(int cc_major, int tile) { return MlaVerifyTileFor(cc_major, tile, KvDtype::kBf16); }

MlaVerifyTile MlaVerifyTileFor(int cc_major) { return MlaVerifyTileFor(cc_major, mla::kTileArch); }

MlaVerifyTile MlaVerifyTileFor(int cc_major, int tile, KvDtype kv) {
  const bool fp8 = kv == KvDtype::kFp8E4m3;
  // The sm_90a tile converts an fp8 cache in its producer's registers, in the same shared memory.
  if (tile == mla::kTileArch && mla::UsesWgmmaTile(cc_major))
    return MlaVerifyTile{mla::TileWgmma64x64::kRows, mla::TileWgmma64x64::kKvTile, mla::TileWgmma64x64::kThreads,
                         mla::kWgmmaSmemBytes, kWgmmaTileMicros};
  // Per-tile times: the mma.sync 64x64 tile measured on the H200 (bs1 H8 D16, P = 4k with 8..64
  // splits: 4.5-4.9 us); the 99 KB mma.sync tiles assumed 2.5x less efficient per FLOP than it.
  // smem_bytes = 0: no variant for this cache type (the plan refuses it as UNIMPLEMENTED).
  auto make = [fp8](auto cfg) {
    using Cfg = decltype(cfg);
    const double work = static_cast<double>(Cfg::kRows) * Cfg::kKvTile / (64.0 * 64.0);
    const int smem = !fp8                         ? static_cast<int>(sizeof(mla::SmemPlan<Cfg>))
                     : mla::kHasFp8Variant<Cfg> ? static_cast<int>(sizeof(mla::SmemPlanFp8<Cfg>))
                                                : 0;
    return MlaVerifyTile{Cfg::kRows, Cfg::kKvTile, Cfg::kThreads, smem, 4.7 * work * (Cfg::kRows >= 64 ? 1.0 : 2.5)};
  };
  switch (mla::ResolvedTile(tile, cc_major)) {
    case mla::kTileQReg32x32: {
      // Twice the 32x16 tile's work per KV tile; assumed as efficient per FLOP as it. Its fp8
      // variant (SmemPlanQRegFp8 in the prefix CTAs, the bf16 plan in the tree CTA) converts e4m3
      // with sm_89's cvt, which the host cannot tell from sm_8x's other archs by the major: it
      // plans fp8 on compute capability 9 and later.
      using Cfg = mla::TileQReg32x32;
      return MlaVerifyTile{Cfg::kRows, Cfg::kKvTile, Cfg::kThreads,
                           fp8 && cc_major < 9 ? 0 : static_cast<int>(sizeof(mla::SmemPlanQReg)),
                           4.7 * Cfg::kRows * Cfg::kKvTile / (64.0 * 64.0) * 2.5};
    }
    case mla::kTile64x64:
      return make(mla::Tile64x64{});
    default:
      return make(mla::Tile32x16{});
  }
}

StatusOr<MlaVerifyWorkspaceLayout> MlaVerifyWorkspace(const MlaVerifyProblem& p, int num_splits) {
  size_t states = 0, rows = 0, lse_bytes = 0, o_bytes = 0, slots = 0;
  const size_t rows_cap = static_cast<size_t>(p.max_draft) * static_cast<size_t>(p.num_heads);
  // One error slot per split-kernel CTA: m-tiles x states, counted with the smallest tile's 16 rows
  // so that every tile's grid fits.
  const size_t min_tile_rows = 16;
  if (!MulOk(static_cast<size_t>(p.batch), static_cast<size_t>(num_splits) + 1, &states) ||
      !MulOk(states, rows_cap, &rows) || !MulOk(rows, sizeof(float), &lse_bytes) ||
      !MulOk(rows, static_cast<size_t>(kMlaVDim) * sizeof(uint16_t), &o_bytes) ||  // bf16 partial O
      !MulOk(states, (rows_cap + min_tile_rows - 1) / min_tile_rows, &slots))
    return Invalid("workspace size overflows size_t");
  MlaVerifyWorkspaceLayout w;
  w.error_slots_offset = kWorkspaceAlign;  // the error word lives at offset 0
  w.error_slots = slots;
  w.part_lse_offset = AlignUp(w.error_slots_offset + slots * sizeof(uint32_t), kWorkspaceAlign);
  w.part_o_offset = AlignUp(w.part_lse_offset + lse_bytes, kWorkspaceAlign);
  w.bytes = w.part_o_offset + o_bytes;
  return w;
}

StatusOr<MlaVerifyPlan> PlanMlaVerify(const MlaVerifyProblem& p, const driver::DeviceInfo& dev,
                                      const MlaVerifyPlanOptions& options) {
  KJIT_RETURN_IF_ERROR(ValidateProblem(p));
  KJIT_RETURN_IF_ERROR(ValidateOptions(options));
  if (dev.cc_major < 8)
    return absl::FailedPreconditionError(
        absl::StrCat("mla_verify needs compute capability >= 8.0 (bf16 mma.sync); device ", dev.ordinal,
                     " (", dev.name, ") is ", dev.cc_major, ".", dev.cc_minor));
  const MlaVerifyTile tile = MlaVerifyTileFor(dev.cc_major, options.tile, p.kv_dtype);
  if (tile.smem_bytes == 0)
    // UNIMPLEMENTED, not FAILED_PRECONDITION: the clients' fallback (kjit.sglang) takes it as "use
    // another kernel" and stays on SGLang's own.
    return absl::UnimplementedError(absl::StrCat(
        "mla_verify: an fp8 kv_cache is not supported by the ", tile.rows, "x", tile.kv_tile, " mma.sync tile (device ", dev.ordinal, ", ",
        dev.name, ", compute capability ", dev.cc_major, ".", dev.cc_minor, "); use a bf16 cache"));
  if (dev.max_smem_per_block_optin < tile.smem_bytes)
    return absl::FailedPreconditionError(
        absl::StrCat("mla_verify tile needs ", tile.smem_bytes, " bytes of shared memory per block; device ",
                     dev.ordinal, " allows ", dev.max_smem_per_block_optin));

  MlaVerifyPlan plan;
  plan.family = std::string(kMlaVerifyFamily);
  plan.specialization = MlaVerifySpecializationName(p.num_heads, p.mask_kind, options.tile, p.kv_dtype);
  // fp8 numerics on sm_90a's own tile: e4m3 warpgroup MMAs for the prefix chunks (a kernel of their
  // own), the draft tree (bf16) by the fp8 specialization's other split kernel. On an H100 faster
  // than the emulating kernel on 10 of 12 shapes from P1k to K5, the tree's launch included; slower
  // on P1k (0.3-1.1 us) and bs4 P4k (2.8 us) (bench/results/kernel_bench-2026-12-06-h100-fp8-short.md).
  const bool fp8_mma = p.kv_dtype == KvDtype::kFp8E4m3 && p.fp8_numerics == Fp8Numerics::kFp8 && options.fp8_mma &&
                       options.tile == mla::kTileArch && mla::UsesWgmmaTile(dev.cc_major);
  plan.main_kernel = MlaVerifySplitExpression(p.num_heads, p.mask_kind, options.tile, p.kv_dtype, fp8_mma);
  if (fp8_mma) plan.tree_kernel = MlaVerifySplitExpression(p.num_heads, p.mask_kind, options.tile, p.kv_dtype);
  plan.fp8_numerics = p.kv_dtype == KvDtype::kFp8E4m3 ? p.fp8_numerics : Fp8Numerics::kDequant;
  plan.combine_kernel = MlaVerifyCombineExpression(p.num_heads);
  plan.num_heads = p.num_heads;
  plan.mask_kind = p.mask_kind;
  plan.kv_dtype = p.kv_dtype;
  plan.tile = options.tile;
  plan.num_splits = options.num_splits > 0 ? options.num_splits : CachedSplits(p, dev, tile);
  KJIT_ASSIGN_OR_RETURN(const MlaVerifyWorkspaceLayout ws, MlaVerifyWorkspace(p, plan.num_splits));
  plan.workspace_bytes = ws.bytes;
  plan.error_word_offset = 0;

  const unsigned rows_cap = static_cast<unsigned>(p.max_draft * p.num_heads);
  plan.main.grid[0] = (rows_cap + tile.rows - 1) / tile.rows;
  {
    constexpr unsigned kHalf = mla::TileWgmma64x64::kHalfRows;  // the only tile with halves
    const unsigned halves = (rows_cap + kHalf - 1) / kHalf;
    const long long ctas = static_cast<long long>(halves) * p.batch * (plan.num_splits + 1);
    // Within three quarters of the SMs: at a whole wave (P2k's 132 CTAs on an H100) the e4m3-MMA
    // sequence ran 3% slower with half tiles, and P1k's 68 CTAs 2-5% faster
    // (bench/results/kernel_bench-2026-12-07-h100-half-tiles.md).
    plan.half_tiles = options.half_tiles && options.tile == mla::kTileArch && mla::UsesWgmmaTile(dev.cc_major) &&
                      halves > plan.main.grid[0] && 4 * ctas <= 3 * static_cast<long long>(dev.sm_count);
    if (plan.half_tiles) plan.main.grid[0] = halves;
  }
  plan.main.grid[1] = static_cast<unsigned>(p.batch);
  // Prefix chunks 1..num_splits, then the draft tree (split 0) as the last slab: launched last.
  plan.main.grid[2] = static_cast<unsigned>(plan.num_splits) + 1;
  plan.main.block[0] = static_cast<unsigned>(tile.threads);
  plan.main.dynamic_smem = static_cast<unsigned>(tile.smem_bytes);
  plan.main.programmatic_dependent = options.programmatic_split && dev.cc_major >= 9;  // griddepcontrol
  if (fp8_mma) {
    plan.tree = plan.main;
    plan.tree.grid[2] = 1;
    // Overlaps the prefix launch (which it does not read) and completes after it, so that the
    // combine, which waits for the launch before it, sees both.
    plan.tree.programmatic_dependent = true;
    plan.main.grid[2] = static_cast<unsigned>(plan.num_splits);
  }
  const int states = plan.num_splits + 1;
  plan.combine_row_parts =
      mla::CombineRowPartsFor(internal::MlaVerifyCombineParts(p.batch, rows_cap, states, dev.sm_count), states);
  plan.combine.grid[0] = mla::CombineCtasPerRequest(rows_cap, plan.combine_row_parts, states);
  plan.combine.grid[1] = static_cast<unsigned>(p.batch);
  plan.combine.block[0] = mla::kCombineThreads;
  plan.combine.programmatic_dependent = dev.cc_major >= 9;  // griddepcontrol: sm_90 and later
  return plan;
}

}  // namespace kjit::kernels
