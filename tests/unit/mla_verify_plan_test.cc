// PlanMlaVerify: validation messages, tile per arch, NSPLIT choice, workspace layout and geometry,
// and the catalog entries of the mla_verify family. CPU only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_sources/mla_verify/traits.h"
#include "runtime/kernels/registry.h"
#include "runtime/kernels/mla_verify/plan.h"

namespace kjit::kernels {
namespace {

driver::DeviceInfo H200() {
  driver::DeviceInfo d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.arch = "sm_90";
  d.sm_count = 132;
  d.max_smem_per_block_optin = 232448;
  return d;
}

driver::DeviceInfo RtxPro6000() {
  driver::DeviceInfo d;
  d.name = "RTX PRO 6000";
  d.cc_major = 12;
  d.arch = "sm_120";
  d.sm_count = 188;
  d.max_smem_per_block_optin = 101376;
  return d;
}

MlaVerifyProblem Problem(int batch, int heads, int draft, int64_t prefix) {
  MlaVerifyProblem p;
  p.batch = batch;
  p.num_heads = heads;
  p.num_q = int64_t{batch} * draft;
  p.num_slots = int64_t{batch} * prefix + 8;
  p.num_kv_indices = int64_t{batch} * prefix;
  p.mask_len = int64_t{batch} * draft * (prefix + draft);
  p.max_draft = draft;
  p.max_prefix = prefix;
  p.sm_scale = 0.14467963f;
  p.q_stride_n = int64_t{heads} * kMlaKDim;
  p.o_stride_n = int64_t{heads} * kMlaVDim;
  return p;
}

void ExpectInvalid(const MlaVerifyProblem& p, const std::string& needle) {
  auto plan = PlanMlaVerify(p, H200());
  ASSERT_FALSE(plan.ok()) << "expected InvalidArgument mentioning " << needle;
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(plan.status().message()).find(needle), std::string::npos) << plan.status();
}

TEST(MlaVerifyPlanTest, RejectsWhatTheKernelCannotTake) {
  for (int h : {0, 1, 4, 12, 24, 96, 256}) {
    MlaVerifyProblem p = Problem(1, 8, 16, 4096);
    p.num_heads = h;
    p.q_stride_n = int64_t{std::max(h, 1)} * kMlaKDim;
    p.o_stride_n = int64_t{std::max(h, 1)} * kMlaVDim;
    ExpectInvalid(p, "num_heads");
  }
  for (int d : {0, -1, 65, 256}) {
    MlaVerifyProblem p = Problem(1, 8, 16, 4096);
    p.max_draft = d;
    ExpectInvalid(p, "max_draft");
  }
  MlaVerifyProblem p = Problem(1, 8, 16, 4096);
  p.batch = 0;
  ExpectInvalid(p, "batch");
  p = Problem(1, 8, 16, 4096);
  p.q_stride_h = 580;  // not a multiple of 8: 16-byte row gathers
  p.q_stride_n = 8 * 580;
  ExpectInvalid(p, "q_stride_h");
  p = Problem(1, 8, 16, 4096);
  p.q_stride_n = 7 * kMlaKDim;  // heads of one token would overlap the next token
  ExpectInvalid(p, "q_stride_n");
  p = Problem(1, 8, 16, 4096);
  p.k_extend_stride_n = 570;
  ExpectInvalid(p, "k_extend_stride_n");
  p = Problem(1, 8, 16, 4096);
  p.o_stride_h = 510;
  ExpectInvalid(p, "o_stride_h");
  p = Problem(1, 8, 16, 4096);
  p.num_slots = -1;
  ExpectInvalid(p, "num_slots");
  p.num_slots = 0;  // an empty kv_cache: every slot is out of range, masked and reported
  EXPECT_TRUE(PlanMlaVerify(p, H200()).ok());
  // The scales are the schema's to check (schema_mla_verify_test): the plan does not use them.
  p = Problem(1, 8, 16, 4096);
  p.sm_scale = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(PlanMlaVerify(p, H200()).ok());
}

TEST(MlaVerifyPlanTest, LimitsAreCheckedWithoutTheBounds) {
  MlaVerifyProblem p = Problem(1, 8, 16, 4096);
  p.max_draft = 0;  // not set yet when the family checks the shapes
  EXPECT_TRUE(CheckMlaVerifyLimits(p).ok());
  p.num_heads = 12;
  EXPECT_EQ(CheckMlaVerifyLimits(p).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MlaVerifyPlanTest, DeviceWithoutEnoughSharedMemoryIsAPrecondition) {
  driver::DeviceInfo d = H200();
  d.max_smem_per_block_optin = 100000;
  auto plan = PlanMlaVerify(Problem(1, 8, 16, 4096), d);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  d = H200();
  d.cc_major = 7;
  EXPECT_EQ(PlanMlaVerify(Problem(1, 8, 16, 4096), d).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MlaVerifyPlanTest, TilePerArchFitsItsLimits) {
  const MlaVerifyTile hopper = MlaVerifyTileFor(9), big = MlaVerifyTileFor(10), small = MlaVerifyTileFor(12);
  EXPECT_EQ(hopper.rows, mla::TileWgmma64x64::kRows);
  EXPECT_EQ(hopper.threads, mla::TileWgmma64x64::kThreads);
  // The kernel aligns its shared memory to 1024 bytes itself: the plan asks for the slack.
  EXPECT_EQ(hopper.smem_bytes, static_cast<int>(sizeof(mla::WgmmaSmem)) + 1024);
  EXPECT_LE(hopper.smem_bytes, 232448);
  // The swizzle atoms need 1024-byte alignment: every tile of the plan starts at a multiple of it.
  EXPECT_EQ(offsetof(mla::WgmmaSmem, kv) % 1024, 0u);
  EXPECT_EQ(offsetof(mla::WgmmaSmem, kv[1]) % 1024, 0u);
  // P goes into a stage's last (rope) group.
  EXPECT_EQ((offsetof(mla::WgmmaSmem, kv[1]) + 8 * mla::WgmmaSmem::kGroupBytes) % 1024, 0u);
  EXPECT_EQ(big.rows, mla::Tile64x64::kRows);
  EXPECT_EQ(big.smem_bytes, static_cast<int>(sizeof(mla::SmemPlan<mla::Tile64x64>)));
  EXPECT_LE(big.smem_bytes, 232448);
  // sm_120: the 32x32 Q-in-registers tile for both cache types (the fp8 variant within the bf16 plan's
  // shared memory: its tree CTA runs the bf16 body).
  EXPECT_EQ(small.rows, mla::TileQReg32x32::kRows);
  EXPECT_EQ(small.kv_tile, mla::TileQReg32x32::kKvTile);
  EXPECT_EQ(small.threads, mla::TileQReg32x32::kThreads);
  EXPECT_EQ(small.smem_bytes, static_cast<int>(sizeof(mla::SmemPlanQReg)));
  EXPECT_LE(small.smem_bytes, 101376);
  const MlaVerifyTile small_fp8 = MlaVerifyTileFor(12, mla::kTileArch, KvDtype::kFp8E4m3);
  EXPECT_EQ(small_fp8.kv_tile, mla::TileQReg32x32::kKvTile);
  EXPECT_EQ(small_fp8.threads, mla::TileQReg32x32::kThreads);
  EXPECT_EQ(small_fp8.smem_bytes, static_cast<int>(sizeof(mla::SmemPlanQReg)));
  EXPECT_LE(static_cast<int>(sizeof(mla::SmemPlanQRegFp8)), small_fp8.smem_bytes);
  // The other 99 KB arches keep the 32x16 tile.
  const MlaVerifyTile ampere = MlaVerifyTileFor(8);
  EXPECT_EQ(ampere.kv_tile, mla::Tile32x16::kKvTile);
  EXPECT_EQ(ampere.smem_bytes, static_cast<int>(sizeof(mla::SmemPlan<mla::Tile32x16>)));
  for (const MlaVerifyTile& t : {hopper, big, small, small_fp8, ampere}) EXPECT_GT(t.tile_us, 0.0);
}

TEST(MlaVerifyPlanTest, GeometryAndWorkspaceFollowTheProblem) {
  const MlaVerifyProblem p = Problem(3, 16, 33, 5000);
  auto plan = PlanMlaVerify(p, H200());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->family, "mla_verify");
  EXPECT_EQ(plan->specialization, "h16_bool");
  const unsigned rows = 33 * 16;
  EXPECT_EQ(plan->main.grid[0], (rows + 63) / 64);
  EXPECT_EQ(plan->main.grid[1], 3u);
  EXPECT_EQ(plan->main.grid[2], static_cast<unsigned>(plan->num_splits) + 1);  // the tree slab last
  EXPECT_EQ(plan->main.block[0], static_cast<unsigned>(mla::TileWgmma64x64::kThreads));
  EXPECT_EQ(plan->main.dynamic_smem, static_cast<unsigned>(mla::kWgmmaSmemBytes));
  EXPECT_EQ(plan->combine.grid[0], mla::CombineCtasPerRequest(rows, plan->combine_row_parts, plan->num_splits + 1));
  EXPECT_EQ(plan->combine.block[0], static_cast<unsigned>(mla::kCombineThreads));
  EXPECT_EQ(plan->combine.grid[1], 3u);
  EXPECT_TRUE(plan->combine.programmatic_dependent);  // sm_90: griddepcontrol
  EXPECT_TRUE(plan->main.programmatic_dependent);     // overlaps the kernel before it
  EXPECT_FALSE(PlanMlaVerify(p, H200(), {.programmatic_split = false})->main.programmatic_dependent);
  auto ws = MlaVerifyWorkspace(p, plan->num_splits);
  ASSERT_TRUE(ws.ok());
  const size_t states = size_t{3} * (plan->num_splits + 1) * rows;
  EXPECT_EQ(plan->workspace_bytes, ws->bytes);
  // One error slot per split CTA, between the error word and the partial LSEs, for every tile.
  EXPECT_GE(ws->error_slots_offset, plan->error_word_offset + 4);
  EXPECT_GE(ws->part_lse_offset, ws->error_slots_offset + ws->error_slots * 4);
  for (int tile = 0; tile < mla::kNumTileIds; ++tile) {
    auto fplan = PlanMlaVerify(p, H200(), {.tile = tile});
    ASSERT_TRUE(fplan.ok()) << tile;
    auto fws = MlaVerifyWorkspace(p, fplan->num_splits);
    ASSERT_TRUE(fws.ok());
    EXPECT_GE(fws->error_slots, size_t{fplan->main.grid[0]} * fplan->main.grid[1] * fplan->main.grid[2]) << tile;
  }
  EXPECT_GE(ws->part_o_offset, ws->part_lse_offset + states * 4);
  EXPECT_EQ(ws->bytes, ws->part_o_offset + states * 512 * 2);  // bf16 partial O
  EXPECT_EQ(ws->part_o_offset % 256, 0u);

  MlaVerifyProblem packed = p;
  packed.mask_kind = MaskKind::kPacked;
  EXPECT_EQ(PlanMlaVerify(packed, H200())->specialization, "h16_packed");
  auto rtx = PlanMlaVerify(p, RtxPro6000());
  ASSERT_TRUE(rtx.ok()) << rtx.status();
  EXPECT_EQ(rtx->main.grid[0], (rows + mla::Tile32x16::kRows - 1) / mla::Tile32x16::kRows);
  EXPECT_LE(rtx->main.dynamic_smem, 101376u);
  EXPECT_TRUE(rtx->combine.programmatic_dependent);
  EXPECT_TRUE(rtx->main.programmatic_dependent);
  driver::DeviceInfo a100 = RtxPro6000();
  a100.cc_major = 8;
  a100.arch = "sm_80";
  auto old_arch = PlanMlaVerify(p, a100);
  ASSERT_TRUE(old_arch.ok()) << old_arch.status();
  EXPECT_FALSE(old_arch->combine.programmatic_dependent);  // griddepcontrol needs sm_90
  EXPECT_FALSE(old_arch->main.programmatic_dependent);
}

// sm_90a's 64-row tile: each CTA covers 32 rows where twice the m-tiles still fit the split grid in
// three quarters of the SMs (short prefixes); never on another tile.
TEST(MlaVerifyPlanTest, HalfTilesWhereTwiceTheMTilesFitThreeQuartersOfTheSms) {
  auto p1k = PlanMlaVerify(Problem(1, 8, 16, 1024), H200());  // 128 rows
  ASSERT_TRUE(p1k.ok()) << p1k.status();
  EXPECT_TRUE(p1k->half_tiles);
  EXPECT_EQ(p1k->main.grid[0], 4u);
  EXPECT_LE(4 * 4 * (p1k->num_splits + 1), 3 * H200().sm_count);
  auto p2k = PlanMlaVerify(Problem(1, 8, 16, 2048), H200());  // 4 halves x 33 slabs: a whole wave
  EXPECT_FALSE(p2k->half_tiles);
  auto whole = PlanMlaVerify(Problem(1, 8, 16, 1024), H200(), {.half_tiles = false});
  EXPECT_FALSE(whole->half_tiles);
  EXPECT_EQ(whole->main.grid[0], 2u);
  EXPECT_EQ(whole->num_splits, p1k->num_splits);
  auto p64k = PlanMlaVerify(Problem(1, 8, 16, 65536), H200());  // a full wave of whole tiles already
  EXPECT_FALSE(p64k->half_tiles);
  EXPECT_EQ(p64k->main.grid[0], 2u);
  auto odd = PlanMlaVerify(Problem(1, 8, 5, 1024), H200());  // 40 rows: one whole tile, two halves
  EXPECT_EQ(odd->main.grid[0], odd->half_tiles ? 2u : 1u);
  for (int tile = 1; tile < mla::kNumTileIds; ++tile) {
    auto forced = PlanMlaVerify(Problem(1, 8, 16, 1024), H200(), {.tile = tile});
    ASSERT_TRUE(forced.ok()) << forced.status();
    EXPECT_FALSE(forced->half_tiles) << tile;
  }
}

TEST(MlaVerifyPlanTest, SplitsFillTheMachineForLongPrefixesOnly) {
  // bs1 H8 D16 P64k: 2 row tiles; the prefix must be spread over most of the 132 SMs.
  auto big = PlanMlaVerify(Problem(1, 8, 16, 65536), H200());
  ASSERT_TRUE(big.ok());
  const unsigned ctas = big->main.grid[0] * big->main.grid[1] * big->main.grid[2];
  EXPECT_GE(ctas, 100u);
  EXPECT_LE(big->main.grid[0] * big->num_splits, 2u * 132);
  // A prefix of one tile has nothing to split.
  auto tiny = PlanMlaVerify(Problem(1, 8, 16, 40), H200());
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->num_splits, 1);
  // Many requests already fill the machine: few splits.
  auto wide = PlanMlaVerify(Problem(64, 64, 16, 4096), H200());
  ASSERT_TRUE(wide.ok());
  EXPECT_LE(wide->num_splits, 2);
  // More SMs, at least as many splits.
  auto rtx = PlanMlaVerify(Problem(1, 8, 16, 65536), RtxPro6000());
  ASSERT_TRUE(rtx.ok());
  EXPECT_GE(rtx->num_splits * rtx->main.grid[0], 100);
  // The sm_120 tile takes one CTA per SM (99 KB of its 128 KB): a long prefix fills all 188 SMs.
  for (int64_t prefix : {65536, 200000}) {
    auto p = PlanMlaVerify(Problem(1, 8, 16, prefix), RtxPro6000());
    ASSERT_TRUE(p.ok());
    EXPECT_GE(p->main.grid[0] * p->main.grid[1] * p->main.grid[2], 188u) << "P " << prefix;
  }
  // A prefix hint near INT64_MAX (kjit_max_prefix is only bounded below) plans as 2^40 tokens,
  // with no overflow in the split model (UBSan runs this test in CI).
  for (int64_t prefix : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 1}) {
    MlaVerifyProblem p = Problem(1, 8, 16, 65536);
    p.max_prefix = prefix;
    auto huge = PlanMlaVerify(p, H200());
    ASSERT_TRUE(huge.ok()) << huge.status();
    p.max_prefix = int64_t{1} << 40;
    EXPECT_EQ(huge->num_splits, PlanMlaVerify(p, H200())->num_splits);
    EXPECT_GT(huge->num_splits, 1);
  }
  // The plan is a pure function of the problem and the device.
  EXPECT_EQ(PlanMlaVerify(Problem(1, 8, 16, 65536), H200())->num_splits, big->num_splits);
  EXPECT_EQ(PlanMlaVerify(Problem(1, 8, 16, 65536), H200(), {.num_splits = 7})->num_splits, 7);
}

TEST(MlaVerifyPlanTest, CombineLayoutFollowsItsModel) {
  using internal::MlaVerifyCombineParts;
  // Past kCombineOneSliceMaxStates states only the wide layouts merge a row.
  EXPECT_FALSE(mla::CombineWide(1));
  EXPECT_FALSE(mla::CombineWide(mla::kCombineOneSliceMaxStates));
  EXPECT_TRUE(mla::CombineWide(mla::kCombineOneSliceMaxStates + 1));
  // The encoding (traits.h): 1 and 2 keep their first meaning (wide only past 32 states, narrow
  // below), so an older client's plan reads as it was made; -1 and -2 are wide whatever the states.
  EXPECT_EQ(mla::CombineCtasPerRequest(17, 1, 9), 3u);  // narrow: 8 rows per CTA, rounded up
  EXPECT_EQ(mla::CombineCtasPerRequest(17, 2, 9), 3u);
  EXPECT_EQ(mla::CombineCtasPerRequest(17, 1, 65), 17u);
  EXPECT_EQ(mla::CombineCtasPerRequest(17, 2, 65), 34u);
  EXPECT_EQ(mla::CombineCtasPerRequest(17, -1, 9), 17u);
  EXPECT_EQ(mla::CombineCtasPerRequest(17, -2, 9), 34u);
  EXPECT_FALSE(mla::CombineIsWide(1, mla::kCombineOneSliceMaxStates));
  EXPECT_TRUE(mla::CombineIsWide(-1, 2));
  EXPECT_TRUE(mla::CombineIsWide(2, mla::kCombineOneSliceMaxStates + 1));
  for (int states : {2, 17, mla::kCombineOneSliceMaxStates, mla::kCombineOneSliceMaxStates + 1, 129}) {
    for (int parts = mla::CombineWide(states) ? 1 : 0; parts <= mla::kCombineMaxRowParts; ++parts) {
      const int enc = mla::CombineRowPartsFor(parts, states);
      EXPECT_EQ(mla::CombineIsWide(enc, states), parts > 0) << states << " " << parts;
      EXPECT_EQ(mla::CombinePartsOf(enc), parts > 0 ? parts : 1) << states << " " << parts;
    }
  }
  // Many states: two CTAs per row while the rows twice over fit the SMs (K7: 64 rows), else one.
  EXPECT_EQ(MlaVerifyCombineParts(1, 64, 133, 132), 2);
  EXPECT_EQ(MlaVerifyCombineParts(1, 128, 65, 132), 1);
  EXPECT_EQ(MlaVerifyCombineParts(1, 128, mla::kCombineOneSliceMaxStates + 1, 132), 1);
  // Few states and many rows (H64, batches): narrow, about one wave.
  EXPECT_EQ(MlaVerifyCombineParts(1, 1024, 9, 132), 0);
  EXPECT_EQ(MlaVerifyCombineParts(8, 128, 9, 132), 0);
  EXPECT_EQ(MlaVerifyCombineParts(2, 528, 4, 132), 0);
  // Few rows over few states (a short prefix, H8 D16 P1k: 16 splits): one CTA per row, not 16
  // narrow CTAs reading 136 KB each.
  EXPECT_EQ(MlaVerifyCombineParts(1, 128, 17, 132), 1);
  // Twice the rows: one CTA per row would take two waves; narrow (measured 0.5 us faster).
  EXPECT_EQ(MlaVerifyCombineParts(2, 128, 17, 132), 0);
  EXPECT_GE(MlaVerifyCombineParts(1, 16, 2, 132), 1);
  // The smallest slice still covers its part of the 512 columns, 8 per thread.
  EXPECT_EQ(mla::kCombineThreads / mla::kCombineMaxSlices * 8 * mla::kCombineMaxRowParts, 512);
  // The plans: their grids follow their layouts, within two waves.
  for (const auto& [batch, heads, draft, prefix, forced] : std::vector<std::tuple<int, int, int, int64_t, int>>{
           {2, 64, 16, 65536, 0}, {2, 8, 16, 65536, 0}, {2, 8, 16, 16384, 0}, {2, 16, 33, 5000, 3},
           {2, 8, 7, 9000, 40}, {1, 8, 16, 1024, 0}, {8, 8, 16, 1024, 0}, {1, 8, 8, 65536, 0}}) {
    const MlaVerifyProblem p = Problem(batch, heads, draft, prefix);
    auto plan = PlanMlaVerify(p, H200(), {.num_splits = forced});
    ASSERT_TRUE(plan.ok()) << plan.status();
    const unsigned rows = static_cast<unsigned>(heads * draft);
    const int states = plan->num_splits + 1;
    SCOPED_TRACE(::testing::Message() << "B " << batch << " H " << heads << " D " << draft << " P " << prefix);
    EXPECT_EQ(plan->combine_row_parts, mla::CombineRowPartsFor(MlaVerifyCombineParts(batch, rows, states, 132), states));
    EXPECT_TRUE(!mla::CombineWide(states) || mla::CombineIsWide(plan->combine_row_parts, states));
    EXPECT_EQ(plan->combine.grid[0], mla::CombineCtasPerRequest(rows, plan->combine_row_parts, states));
    EXPECT_EQ(plan->combine.grid[1], static_cast<unsigned>(batch));
    EXPECT_LE(plan->combine.grid[0] * plan->combine.grid[1], 2u * 132);
  }
  auto p1k = PlanMlaVerify(Problem(1, 8, 16, 1024), H200());
  ASSERT_TRUE(p1k.ok()) << p1k.status();
  EXPECT_EQ(p1k->combine_row_parts, -1);  // wide with 17 states: the new encoding
  EXPECT_EQ(p1k->combine.grid[0], 128u);
  auto k5 = PlanMlaVerify(Problem(1, 64, 16, 65536), H200());
  ASSERT_TRUE(k5.ok()) << k5.status();
  EXPECT_EQ(k5->combine_row_parts, 1);  // narrow, as every earlier plan encoded it
  auto k7 = PlanMlaVerify(Problem(1, 8, 8, 65536), H200());
  ASSERT_TRUE(k7.ok()) << k7.status();
  EXPECT_EQ(k7->combine_row_parts, 2);
  EXPECT_EQ(k7->combine.grid[0], 128u);
}

TEST(MlaVerifyPlanTest, CatalogHasEveryHeadCountAndMaskKind) {
  std::set<std::string> names;
  for (const Specialization& s : MlaVerifySpecializations()) {
    EXPECT_EQ(s.family, "mla_verify");
    EXPECT_EQ(s.entry_source, "mla_verify/mla_verify.cu");
    const KvDtype kv = s.name.find("_fp8") != std::string::npos ? KvDtype::kFp8E4m3 : KvDtype::kBf16;
    // An fp8 specialization also holds the prefix kernel of fp8 numerics on e4m3 warpgroup MMAs.
    ASSERT_EQ(s.name_expressions.size(), kv == KvDtype::kFp8E4m3 ? 3u : 2u);
    if (kv == KvDtype::kFp8E4m3) {
      EXPECT_EQ(s.name_expressions[2].substr(s.name_expressions[2].size() - 7), ", 0, 2>");
    }
    ASSERT_TRUE(s.max_dynamic_smem);
    EXPECT_EQ(s.max_dynamic_smem("sm_90"), MlaVerifyTileFor(9).smem_bytes);  // the same smem for fp8
    EXPECT_EQ(s.max_dynamic_smem("sm_90a"), MlaVerifyTileFor(9).smem_bytes);
    EXPECT_EQ(s.max_dynamic_smem("sm_120"), MlaVerifyTileFor(12, 0, kv).smem_bytes);
    EXPECT_LE(s.max_dynamic_smem("sm_120"), 101376);
    // wgmma needs the arch-specific target; every other arch compiles as asked.
    ASSERT_TRUE(s.target_arch);
    EXPECT_EQ(s.target_arch("sm_90"), "sm_90a");
    EXPECT_EQ(s.target_arch("sm_90a"), "sm_90a");
    EXPECT_EQ(s.target_arch("sm_120"), "sm_120");
    EXPECT_EQ(s.target_arch("sm_100"), "sm_100");
    names.insert(s.name);
  }
  EXPECT_EQ(names.size(), 20u);
  for (int h : {8, 16, 32, 64, 128})
    for (const char* m : {"bool", "packed"}) {
      EXPECT_TRUE(names.count("h" + std::to_string(h) + "_" + m)) << h << m;
      EXPECT_TRUE(names.count("h" + std::to_string(h) + "_" + m + "_fp8")) << h << m;
    }
  EXPECT_EQ(MlaVerifySplitExpression(64, MaskKind::kPacked), "kjit::mla::MlaVerifySplit<64, 1>");
  EXPECT_EQ(MlaVerifySplitExpression(64, MaskKind::kPacked, 0, KvDtype::kFp8E4m3), "kjit::mla::MlaVerifySplit<64, 1, 0, 1>");
  EXPECT_EQ(MlaVerifySplitExpression(8, MaskKind::kBool, mla::kTile32x16, KvDtype::kFp8E4m3),
            "kjit::mla::MlaVerifySplit<8, 0, 1, 1>");
  EXPECT_EQ(MlaVerifySplitExpression(8, MaskKind::kBool, 0, KvDtype::kFp8E4m3, true), "kjit::mla::MlaVerifySplit<8, 0, 0, 2>");
  EXPECT_EQ(MlaVerifyCombineExpression(8), "kjit::mla::MlaVerifyCombine<8>");
}

// fp8 numerics on sm_90a's own tile: the prefix chunks on e4m3 warpgroup MMAs (grid z = num_splits),
// the draft tree a launch of the fp8 specialization's other split kernel (z = 1, programmatic, so
// that the combine after it sees both). Dequant, forced tiles and sm_120 keep one split launch.
TEST(MlaVerifyPlanTest, Fp8NumericsOnSm90aPlanThePrefixOnE4m3MmasAndATreeLaunch) {
  MlaVerifyProblem p = Problem(2, 8, 16, 65536);
  p.kv_dtype = KvDtype::kFp8E4m3;
  p.fp8_numerics = Fp8Numerics::kFp8;
  auto hopper = PlanMlaVerify(p, H200());
  ASSERT_TRUE(hopper.ok()) << hopper.status();
  EXPECT_EQ(hopper->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 0, 2>");
  EXPECT_EQ(hopper->tree_kernel, "kjit::mla::MlaVerifySplit<8, 0, 0, 1>");
  EXPECT_EQ(hopper->fp8_numerics, Fp8Numerics::kFp8);
  EXPECT_EQ(hopper->main.grid[2], static_cast<unsigned>(hopper->num_splits));
  EXPECT_EQ(hopper->tree.grid[0], hopper->main.grid[0]);
  EXPECT_EQ(hopper->tree.grid[1], 2u);
  EXPECT_EQ(hopper->tree.grid[2], 1u);
  EXPECT_EQ(hopper->tree.block[0], hopper->main.block[0]);
  EXPECT_EQ(hopper->tree.dynamic_smem, hopper->main.dynamic_smem);
  EXPECT_TRUE(hopper->tree.programmatic_dependent);
  EXPECT_TRUE(hopper->main.programmatic_dependent);
  auto rtx = PlanMlaVerify(p, RtxPro6000());
  ASSERT_TRUE(rtx.ok()) << rtx.status();
  EXPECT_EQ(rtx->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 0, 1>");
  EXPECT_TRUE(rtx->tree_kernel.empty());
  EXPECT_EQ(rtx->main.grid[2], static_cast<unsigned>(rtx->num_splits) + 1);
  auto forced = PlanMlaVerify(p, H200(), {.tile = mla::kTile32x16});
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_TRUE(forced->tree_kernel.empty());
  p.fp8_numerics = Fp8Numerics::kDequant;
  auto dequant = PlanMlaVerify(p, H200());
  ASSERT_TRUE(dequant.ok()) << dequant.status();
  EXPECT_EQ(dequant->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 0, 1>");
  EXPECT_TRUE(dequant->tree_kernel.empty());
  EXPECT_EQ(dequant->fp8_numerics, Fp8Numerics::kDequant);
  EXPECT_EQ(dequant->main.grid[2], static_cast<unsigned>(dequant->num_splits) + 1);
}

// fp8 numerics on sm_90a plan e4m3 MMAs whatever the prefix and batch; options.fp8_mma = false keeps
// the emulating kernel (one split launch, the tree its last slab) with the same split count.
TEST(MlaVerifyPlanTest, Fp8NumericsOnSm90aRunE4m3MmasUnlessTheOptionRefusesThem) {
  for (int64_t prefix : {0, 1024, 4096, 16384, 262144}) {
    for (int batch : {1, 4}) {
      MlaVerifyProblem p = Problem(batch, 8, 16, prefix);
      p.kv_dtype = KvDtype::kFp8E4m3;
      p.fp8_numerics = Fp8Numerics::kFp8;
      auto mma = PlanMlaVerify(p, H200());
      ASSERT_TRUE(mma.ok()) << mma.status();
      EXPECT_TRUE(mma->e4m3_mma()) << "P " << prefix << " bs " << batch;
      EXPECT_EQ(mma->main.grid[2], static_cast<unsigned>(mma->num_splits));
      auto emulated = PlanMlaVerify(p, H200(), {.fp8_mma = false});
      ASSERT_TRUE(emulated.ok()) << emulated.status();
      EXPECT_FALSE(emulated->e4m3_mma());
      EXPECT_EQ(emulated->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 0, 1>");
      EXPECT_EQ(emulated->num_splits, mma->num_splits);
      EXPECT_EQ(emulated->main.grid[2], static_cast<unsigned>(emulated->num_splits) + 1);
      EXPECT_EQ(emulated->fp8_numerics, Fp8Numerics::kFp8);
      EXPECT_FALSE(PlanMlaVerify(p, RtxPro6000())->e4m3_mma());
    }
  }
}

TEST(MlaVerifyPlanTest, AnFp8CacheTakesTheFp8SpecializationOnEveryTileThatHasOne) {
  MlaVerifyProblem p = Problem(1, 8, 16, 65536);
  p.kv_dtype = KvDtype::kFp8E4m3;
  auto hopper = PlanMlaVerify(p, H200());
  ASSERT_TRUE(hopper.ok()) << hopper.status();
  EXPECT_EQ(hopper->specialization, "h8_bool_fp8");
  EXPECT_EQ(hopper->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 0, 1>");
  EXPECT_EQ(hopper->kv_dtype, KvDtype::kFp8E4m3);
  EXPECT_EQ(hopper->main.dynamic_smem, static_cast<unsigned>(mla::kWgmmaSmemBytes));  // converted in registers
  auto rtx = PlanMlaVerify(p, RtxPro6000());
  ASSERT_TRUE(rtx.ok()) << rtx.status();
  EXPECT_EQ(rtx->specialization, "h8_bool_fp8");
  EXPECT_EQ(rtx->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 0, 1>");  // sm_120's own: the 32x32 tile
  EXPECT_EQ(rtx->main.block[0], static_cast<unsigned>(mla::TileQReg32x32::kThreads));
  EXPECT_EQ(rtx->main.dynamic_smem, sizeof(mla::SmemPlanQReg));  // its tree CTA runs the bf16 body
  auto rtx_small = PlanMlaVerify(p, RtxPro6000(), {.tile = mla::kTile32x16});
  ASSERT_TRUE(rtx_small.ok()) << rtx_small.status();
  EXPECT_EQ(rtx_small->main.dynamic_smem, sizeof(mla::SmemPlanFp8<mla::Tile32x16>));  // a staging ring of its own
  EXPECT_GT(rtx_small->main.dynamic_smem, sizeof(mla::SmemPlan<mla::Tile32x16>));
  auto forced = PlanMlaVerify(p, H200(), {.tile = mla::kTile32x16});
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ(forced->specialization, "h8_bool_fp8_t32x16");
  EXPECT_EQ(forced->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 1, 1>");
  // The 64x64 mma.sync tile (sm_100, or forced) has no fp8 variant: a clear refusal, not a launch.
  auto large = PlanMlaVerify(p, H200(), {.tile = mla::kTile64x64});
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.status().code(), absl::StatusCode::kUnimplemented);  // clients fall back on it
  EXPECT_NE(std::string(large.status().message()).find("fp8 kv_cache"), std::string::npos) << large.status();
  // Values outside the enums are refused, not planned as a bf16 cache.
  MlaVerifyProblem odd = p;
  odd.kv_dtype = static_cast<KvDtype>(7);
  EXPECT_EQ(PlanMlaVerify(odd, H200()).status().code(), absl::StatusCode::kInvalidArgument);
  odd = p;
  odd.fp8_numerics = static_cast<Fp8Numerics>(-1);
  EXPECT_EQ(PlanMlaVerify(odd, H200()).status().code(), absl::StatusCode::kInvalidArgument);
  // The split model is the cache type's: the same splits for the same shape.
  auto bf16 = PlanMlaVerify(Problem(1, 8, 16, 65536), H200());
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(bf16->specialization, "h8_bool");
  EXPECT_EQ(bf16->num_splits, hopper->num_splits);
}

// The split model counts the CTAs an SM holds by shared memory and by registers: two 32x16 CTAs
// (128 threads) fit an H200 SM, one of the 256-thread 32x32 tile does whatever its shared memory.
TEST(MlaVerifyPlanTest, CtaSlotsCountRegistersAsWellAsSharedMemory) {
  const MlaVerifyProblem p = Problem(1, 8, 16, 65536);
  for (int tile : {mla::kTile32x16, mla::kTileQReg32x32}) {
    const MlaVerifyTile t = MlaVerifyTileFor(9, tile);
    driver::DeviceInfo one = H200();  // room for exactly one CTA's shared memory
    one.max_smem_per_block_optin = t.smem_bytes;
    auto roomy = PlanMlaVerify(p, H200(), {.tile = tile});
    auto tight = PlanMlaVerify(p, one, {.tile = tile});
    ASSERT_TRUE(roomy.ok() && tight.ok()) << tile;
    ASSERT_GE(H200().max_smem_per_block_optin / t.smem_bytes, 2) << tile;  // two by shared memory
    if (tile == mla::kTileQReg32x32) {
      EXPECT_EQ(roomy->num_splits, tight->num_splits);  // one by registers either way
    } else {
      EXPECT_GT(roomy->num_splits, tight->num_splits);  // two slots per SM spread the prefix wider
    }
  }
}

TEST(MlaVerifyPlanTest, ForcedTilesHaveTheirOwnSpecializationsAndGeometry) {
  EXPECT_TRUE(MlaVerifyForcedTileSpecializations(0).empty());
  EXPECT_TRUE(MlaVerifyForcedTileSpecializations(mla::kNumTileIds).empty());
  const std::vector<Specialization> large = MlaVerifyForcedTileSpecializations(mla::kTile64x64);
  ASSERT_EQ(large.size(), 20u);  // bf16 caches first, then fp8
  EXPECT_EQ(large[0].name, "h8_bool_t64x64");
  EXPECT_EQ(large[0].name_expressions[0], "kjit::mla::MlaVerifySplit<8, 0, 2>");
  EXPECT_EQ(large[0].max_dynamic_smem("sm_90"), static_cast<int>(sizeof(mla::SmemPlan<mla::Tile64x64>)));
  const std::vector<Specialization> small = MlaVerifyForcedTileSpecializations(mla::kTile32x16);
  ASSERT_EQ(small.size(), 20u);
  EXPECT_EQ(small[11].name, "h8_packed_fp8_t32x16");
  EXPECT_EQ(small[11].max_dynamic_smem("sm_120"), static_cast<int>(sizeof(mla::SmemPlanFp8<mla::Tile32x16>)));
  EXPECT_LE(small[11].max_dynamic_smem("sm_120"), 101376);
  EXPECT_EQ(large[10].max_dynamic_smem("sm_90"), 0);  // no fp8 variant of the 64x64 mma.sync tile
  EXPECT_EQ(small[1].name, "h8_packed_t32x16");
  EXPECT_EQ(small[1].name_expressions[0], "kjit::mla::MlaVerifySplit<8, 1, 1>");
  EXPECT_EQ(small[1].max_dynamic_smem("sm_120"), static_cast<int>(sizeof(mla::SmemPlan<mla::Tile32x16>)));
  EXPECT_LE(small[1].max_dynamic_smem("sm_120"), 101376);

  const MlaVerifyProblem p = Problem(1, 8, 16, 65536);
  auto plan = PlanMlaVerify(p, H200(), {.tile = mla::kTile32x16});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->specialization, "h8_bool_t32x16");
  EXPECT_EQ(plan->tile, mla::kTile32x16);
  EXPECT_EQ(plan->main.grid[0], 128u / mla::Tile32x16::kRows);
  EXPECT_EQ(plan->main.block[0], static_cast<unsigned>(mla::Tile32x16::kThreads));
  EXPECT_EQ(plan->main.dynamic_smem, sizeof(mla::SmemPlan<mla::Tile32x16>));
  plan = PlanMlaVerify(p, H200(), {.tile = mla::kTile64x64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->specialization, "h8_bool_t64x64");
  EXPECT_EQ(plan->main.block[0], static_cast<unsigned>(mla::Tile64x64::kThreads));
  EXPECT_EQ(plan->main.dynamic_smem, sizeof(mla::SmemPlan<mla::Tile64x64>));
  // The 32x32 Q-in-registers tile: 256 threads, its own shared-memory plan within sm_120's 99 KB.
  plan = PlanMlaVerify(p, RtxPro6000(), {.tile = mla::kTileQReg32x32});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->specialization, "h8_bool_t32x32");
  EXPECT_EQ(plan->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 3>");
  EXPECT_EQ(plan->main.grid[0], 128u / mla::TileQReg32x32::kRows);
  EXPECT_EQ(plan->main.block[0], 256u);
  EXPECT_EQ(plan->main.dynamic_smem, sizeof(mla::SmemPlanQReg));
  EXPECT_LE(plan->main.dynamic_smem, 101376u);
  const std::vector<Specialization> qreg = MlaVerifyForcedTileSpecializations(mla::kTileQReg32x32);
  ASSERT_EQ(qreg.size(), 20u);
  EXPECT_EQ(qreg[1].name, "h8_packed_t32x32");
  EXPECT_EQ(qreg[1].max_dynamic_smem("sm_120"), static_cast<int>(sizeof(mla::SmemPlanQReg)));
  // Its fp8 variant: the prefix CTAs' plan (SmemPlanQRegFp8) fits the bf16 one the tree CTA uses,
  // which the launch asks for; it converts e4m3 with sm_89's cvt, so a device whose major is 8 (the
  // host cannot tell sm_89 from sm_86 by it) is refused.
  EXPECT_EQ(qreg[11].name, "h8_packed_fp8_t32x32");
  EXPECT_EQ(qreg[11].max_dynamic_smem("sm_120"), static_cast<int>(sizeof(mla::SmemPlanQReg)));
  EXPECT_EQ(qreg[11].max_dynamic_smem("sm_90"), static_cast<int>(sizeof(mla::SmemPlanQReg)));
  EXPECT_EQ(qreg[11].max_dynamic_smem("sm_86"), 0);
  EXPECT_EQ(qreg[1].max_dynamic_smem("sm_86"), static_cast<int>(sizeof(mla::SmemPlanQReg)));
  MlaVerifyProblem fp8 = p;
  fp8.kv_dtype = KvDtype::kFp8E4m3;
  plan = PlanMlaVerify(fp8, RtxPro6000(), {.tile = mla::kTileQReg32x32});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->specialization, "h8_bool_fp8_t32x32");
  EXPECT_EQ(plan->main_kernel, "kjit::mla::MlaVerifySplit<8, 0, 3, 1>");
  EXPECT_EQ(plan->main.block[0], 256u);
  EXPECT_EQ(plan->main.dynamic_smem, sizeof(mla::SmemPlanQReg));
  driver::DeviceInfo ampere = RtxPro6000();
  ampere.cc_major = 8, ampere.cc_minor = 6;
  auto refused = PlanMlaVerify(fp8, ampere, {.tile = mla::kTileQReg32x32});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented) << refused.status();
  EXPECT_NE(std::string(refused.status().message()).find("32x32"), std::string::npos) << refused.status();
  EXPECT_TRUE(PlanMlaVerify(p, ampere, {.tile = mla::kTileQReg32x32}).ok());
  EXPECT_EQ(PlanMlaVerify(p, H200(), {.tile = mla::kNumTileIds}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanMlaVerify(p, H200(), {.tile = -1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanMlaVerify(p, H200(), {.num_splits = mla::kCombineMaxStates}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The closed-form makespan against the heap simulation it replaced (every CTA, in launch order:
// prefix CTAs, then tree CTAs, taken by the slot that frees first), on random launches: equal to the
// last bit (all lengths are half tiles).
double SimulatedMakespan(int slots, long ctas_per_split, long prefix_tiles, long tree_tiles, int splits,
                         double state_tiles) {
  const long per_split = (prefix_tiles + splits - 1) / splits;
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int i = 0; i < slots; ++i) free_at.push(0.0);
  double end = 0;
  auto run = [&](double len) {
    const double t = free_at.top() + len;
    free_at.pop();
    free_at.push(t);
    end = std::max(end, t);
  };
  for (long i = 0; i < ctas_per_split * splits; ++i) run(static_cast<double>(per_split) + 1.5);
  for (long i = 0; i < ctas_per_split; ++i) run(static_cast<double>(tree_tiles) + 1.5);
  return end + state_tiles * (splits + 1);
}

TEST(MlaVerifyPlanTest, MakespanClosedFormEqualsTheSimulation) {
  std::mt19937_64 rng(20261129);
  auto pick = [&rng](long lo, long hi) { return lo + static_cast<long>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  for (int i = 0; i < 3000; ++i) {
    const int slots = static_cast<int>(pick(1, 400));
    const long ctas = pick(1, 300), prefix_tiles = pick(1, 5000), tree_tiles = pick(0, 4);
    const int splits = static_cast<int>(pick(1, 300));
    const double state = static_cast<double>(pick(0, 40)) / 16;
    const double want = SimulatedMakespan(slots, ctas, prefix_tiles, tree_tiles, splits, state);
    const double got = internal::MlaVerifyMakespanTiles(slots, ctas, prefix_tiles, tree_tiles, splits, state);
    ASSERT_EQ(got, want) << "slots " << slots << " ctas " << ctas << " prefix tiles " << prefix_tiles << " tree tiles "
                         << tree_tiles << " splits " << splits;
  }
}

}  // namespace
}  // namespace kjit::kernels
