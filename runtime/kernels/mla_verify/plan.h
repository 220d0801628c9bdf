// The fast MLA tree-verify family "mla_verify": names of its specializations and its plan (launch.h
// launches it, family.cc describes it). The plan is a pure function of MlaVerifyProblem and the device, so a launch sequence
// captured in a CUDA graph stays valid while the buffers' contents (P_b, D_b, masks) change.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/catalog.h"
#include "runtime/kernels/mla_verify/args.h"

namespace kjit::kernels {

inline constexpr std::string_view kMlaVerifyFamily = "mla_verify";
inline constexpr std::string_view kMlaVerifySource = "mla_verify/mla_verify.cu";

// Catalog names: specialization "h<H>_<bool|packed>" (a bf16 cache) or "h<H>_<bool|packed>_fp8" (an
// fp8 e4m3 cache), with the split kernel and the combine; with a forced tile
// (MlaVerifyPlanOptions::tile > 0) "h<H>_<mask>[_fp8]_t<rows>x<kv>", whose split kernel is
// instantiated for that tile. Those are not in the catalog (MlaVerifyForcedTileSpecializations).
std::string MlaVerifySpecializationName(int num_heads, MaskKind mask, int tile = 0, KvDtype kv = KvDtype::kBf16);
// fp8_mma (an fp8 cache only): the prefix-only kernel with fp8 numerics on e4m3 warpgroup MMAs
// (sm_90a's own tile), MlaVerifyPlan::tree_kernel's partner.
std::string MlaVerifySplitExpression(int num_heads, MaskKind mask, int tile = 0, KvDtype kv = KvDtype::kBf16,
                                     bool fp8_mma = false);
std::string MlaVerifyCombineExpression(int num_heads);
// Every (H, mask) specialization of the catalog (tile 0) or of a forced tile 1..kNumTileIds-1 (empty
// for another value).
std::vector<Specialization> MlaVerifySpecializations(int tile = 0);
std::vector<Specialization> MlaVerifyForcedTileSpecializations(int tile);

// Tile the split kernel uses on a device of compute capability cc_major (the device code picks the
// same tile from __CUDA_ARCH__): rows per CTA, KV rows per stage, threads, dynamic shared memory.
struct MlaVerifyTile {
  int rows = 0;
  int kv_tile = 0;
  int threads = 0;
  int smem_bytes = 0;
  double tile_us = 0;  // time of one KV tile of one CTA (the split model's unit), measured on the H200
};
MlaVerifyTile MlaVerifyTileFor(int cc_major);
// The tile of a launch with a bf16 cache: the device's (tile == 0: warpgroup MMA 64x64 on sm_90,
// mma.sync 64x64 on sm_100, 32x32 with Q in registers on sm_120, 32x16 elsewhere; mla::ResolvedTile)
// or a forced mma.sync one (1: 32x16, 2: 64x64, 3: 32x32).
MlaVerifyTile MlaVerifyTileFor(int cc_major, int tile);
// The same for a cache of element type kv: the 32x16 tile stages an fp8 cache's bytes in shared
// memory of its own (mla::SmemPlanFp8), the 32x32 tile streams them and converts in registers
// (mla::SmemPlanQRegFp8, compute capability 9 and later; sm_120's own fp8 tile). smem_bytes is 0
// where the tile has no fp8 variant (the 64x64 mma.sync tile of sm_100: its 227 KB are taken by the
// bf16 stages).
MlaVerifyTile MlaVerifyTileFor(int cc_major, int tile, KvDtype kv);

// Validates what the host can (InvalidArgument saying what to fix): H in {8,16,32,64,128},
// 1 <= max_draft <= 64, batch in [1, 65535], non-negative sizes, strides (multiples of 8 elements,
// rows not overlapping); FailedPrecondition when the device lacks the shared memory
// the tile needs; options.tile in 0..2. Chooses NSPLIT from B, max_draft, max_prefix (a hint: 0 =
// unknown) and dev.sm_count unless options.num_splits > 0 (a makespan model of per-tile time, waves
// and partial-state traffic; correctness never depends on max_prefix). Workspace: error word, one
// error slot per split-kernel CTA, then per (request, split) the partial LSE (fp32) and O (bf16) of
// max_draft * H rows. An fp8 cache with fp8 numerics on sm_90a's own tile runs its prefix on e4m3
// MMAs with a tree launch of its own unless options.fp8_mma is false (the emulating split kernel).
StatusOr<MlaVerifyPlan> PlanMlaVerify(const MlaVerifyProblem& p, const driver::DeviceInfo& dev,
                                      const MlaVerifyPlanOptions& options = {});

// The checks of PlanMlaVerify that need neither the bounds nor the device: what the family checks
// with the shapes, before any memory is looked up.
Status CheckMlaVerifyLimits(const MlaVerifyProblem& p);

// Workspace offsets of a plan (the launcher and tests use them).
struct MlaVerifyWorkspaceLayout {
  size_t error_slots_offset = 0;  // uint32 per split-kernel CTA
  size_t error_slots = 0;         // slots there: enough for any tile's grid
  size_t part_lse_offset = 0;
  size_t part_o_offset = 0;
  size_t bytes = 0;
};
StatusOr<MlaVerifyWorkspaceLayout> MlaVerifyWorkspace(const MlaVerifyProblem& p, int num_splits);

namespace internal {
// The split model's makespan, in KV-tile times, of one launch: ctas_per_split * splits prefix CTAs
// of ceil(prefix_tiles / splits) tiles first, then ctas_per_split tree CTAs of tree_tiles tiles (the
// kernel's launch order), each on the CTA slot that frees first (each CTA also pays 1.5 tiles of
// fixed cost), plus state_tiles per state for the combine. Exposed for its test.
double MlaVerifyMakespanTiles(int slots, long ctas_per_split, long prefix_tiles, long tree_tiles, int splits,
                              double state_tiles);
// The combine's layout for `batch` requests of rows_cap rows and `states` states on `sms` SMs:
// 0 (narrow) or the CTAs per row of the wide layout (traits.h). Exposed for its test.
int MlaVerifyCombineParts(long long batch, unsigned rows_cap, int states, int sms);
}  // namespace internal

}  // namespace kjit::kernels
