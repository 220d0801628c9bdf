// Host-side description of one MLA tree-verify launch (the contract of shared/design KERNEL.md).
// Plain structs: shared by the daemon, the in-process client and the tests; no transport types.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kjit::kernels {

inline constexpr int kMlaKDim = 576;  // latent 512 + rope 64
inline constexpr int kMlaVDim = 512;
inline constexpr int kMlaMaxDraft = 64;  // draft tokens per request (D_b)
inline constexpr int kMlaMaxBatch = 65535;  // requests per launch (B: the split grid's y)

enum class MaskKind : int {
  kBool = 0,    // bool/uint8: per request D_b rows x (P_b + D_b) cols from mask_indptr[b]; last D_b cols read
  kPacked = 1,  // uint32 bits: per draft row ceil(D_b/32) words; request b's rows start at word
                // sum_{b'<b} D_b' * ceil(D_b'/32); bit c of row r allows draft column c
};

// Element type of kv_cache. q, k_extend, v_extend and o are bf16 whatever it is.
enum class KvDtype : int {
  kBf16 = 0,
  kFp8E4m3 = 1,  // one byte per element (OCP e4m3, "float8_e4m3fn"): rows of 576 bytes
};

// How an fp8 cache is computed with (KERNEL.md "FP8"). Both read the cache's bytes exactly and
// apply k_scale to the scores and v_scale to the output; draft rows (k_extend) are bf16 throughout.
enum class Fp8Numerics : int {
  kDequant = 0,  // cache values converted to bf16 on chip, bf16 MMAs with bf16 q and P (the default)
  kFp8 = 1,      // SGLang's Triton numerics: q and P rounded to e4m3 (round to nearest even,
                 // saturating at +-448) for the prefix's Q.K^T and P.V
};

// What the host knows without reading device memory. Everything the plan depends on is here, so a
// launch sequence captured in a CUDA graph stays valid when the buffers' contents change.
struct MlaVerifyProblem {
  int batch = 0;              // B
  int num_heads = 0;          // H
  int64_t num_q = 0;          // N = sum D_b (rows of q, k_extend, o)
  int64_t num_slots = 0;      // S (rows of kv_cache)
  int64_t num_kv_indices = 0; // length of kv_indices (>= kv_indptr[B])
  int64_t mask_len = 0;       // elements of the mask buffer (bytes for kBool, words for kPacked)
  int max_draft = 0;          // upper bound on every D_b (1..64 required)
  int64_t max_prefix = 0;     // upper bound on every P_b; a planning hint (0 = unknown)
  MaskKind mask_kind = MaskKind::kBool;
  KvDtype kv_dtype = KvDtype::kBf16;
  Fp8Numerics fp8_numerics = Fp8Numerics::kDequant;  // with kv_dtype kFp8E4m3 only
  bool qo_indptr_64 = false;  // qo_indptr holds int64 entries (else int32)
  bool kv_indptr_64 = false;  // kv_indptr holds int64 entries (else int32)
  bool is_causal = true;
  bool write_lse = false;
  bool check_v_extend = false;  // a v_extend is given: the kernels check it equals k_extend[..., :512]
  float sm_scale = 0.f;
  float k_scale = 1.f;
  float v_scale = 1.f;
  // Strides in elements. q is [N, H, 576]; o is [N, H, 512]; k_extend is [N, 1, 576];
  // kv_cache is [S, 1, 576] with row stride 576 (1152 bytes in bf16, 576 in fp8).
  int64_t q_stride_n = 0, q_stride_h = kMlaKDim;
  int64_t k_extend_stride_n = kMlaKDim;
  int64_t v_extend_stride_n = kMlaVDim;
  int64_t o_stride_n = 0, o_stride_h = kMlaVDim;
};

// The kernels' score scales in log2 units, as the launch computes them in fp32 (MlaVerifyParams'
// prefix_scale_log2 and tree_scale_log2): the schema checks these very values.
struct MlaVerifyScoreScales {
  float prefix_log2;  // sm_scale * k_scale * log2(e)
  float tree_log2;    // sm_scale * log2(e)
};
inline MlaVerifyScoreScales ScoreScalesLog2(const MlaVerifyProblem& p) {
  constexpr float kLog2e = 1.4426950408889634f;
  return {p.sm_scale * p.k_scale * kLog2e, p.sm_scale * kLog2e};
}

// Knobs of tests and benchmarks (production plans never set them): a tile other than the device's
// own (mla::TileId, on any device with the shared memory), a fixed number of prefix chunks, and the
// emulating kernel for fp8 numerics.
struct MlaVerifyPlanOptions {
  int tile = 0;        // mla_verify: 0 = the device's tile; 1 = 32x16, 2 = 64x64 mma.sync
  int num_splits = 0;  // mla_verify: prefix chunks per request when > 0; 0 = planned
  // fp8 numerics on e4m3 MMAs where the device has them (sm_90a's own tile: MlaVerifyPlan::e4m3_mma);
  // false: the emulating split kernel (bf16 MMAs on e4m3-rounded operands) everywhere.
  bool fp8_mma = true;
  // sm_90+: the split kernel as a programmatic dependent launch, so that its launch overlaps the tail
  // of the kernel before it in the stream (its CTAs wait for that grid before reading anything);
  // false: a plain launch, after that kernel has completed.
  bool programmatic_split = true;
  // sm_90a's tile: where twice its m-tiles still fit the split grid in three quarters of the SMs
  // (short prefixes), each CTA covers 32 of a tile's 64 rows, so that each writes half the partial
  // O (MlaVerifyPlan::half_tiles); false: whole tiles.
  bool half_tiles = true;
};

// Device addresses (all on the launching device). lse == 0 when not written.
struct MlaVerifyBuffers {
  CUdeviceptr q = 0, k_extend = 0, kv_cache = 0;
  CUdeviceptr v_extend = 0;  // with MlaVerifyProblem::check_v_extend
  CUdeviceptr qo_indptr = 0, kv_indptr = 0, kv_indices = 0;
  CUdeviceptr mask = 0, mask_indptr = 0;
  CUdeviceptr o = 0, lse = 0;
  CUdeviceptr workspace = 0;  // sized by the family's plan; holds the error word
  // mla_verify only: where the launch's error word goes instead (0: the workspace's). The combine
  // writes it with one plain store after the split kernel's grid, so it may be host memory mapped
  // into the device (read after the stream synchronizes, with no copy queued).
  CUdeviceptr error_word = 0;
  // Optional: a word the kernels OR every nonzero error bit into and never clear, for a caller that
  // reads errors at its own sync points (the in-process client) rather than after each launch.
  CUdeviceptr accumulated_error_word = 0;
};

// Bits of the error word that a kernel sets in the workspace; the host reports them after the launch.
enum MlaVerifyError : uint32_t {
  kMlaErrKvIndexOutOfRange = 1u << 0,  // a kv_indices entry >= S (treated as masked, never read)
  kMlaErrBadIndptr = 1u << 1,          // an indptr inconsistent with the sizes (request skipped)
  kMlaErrVExtendDiffers = 1u << 2,     // v_extend is not k_extend[..., :512] (V was read from k_extend)
};

// Grid, block and shared memory of one kernel launch of a family's launch sequence.
struct KernelGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem = 0;
  // Launched with programmatic stream serialization (sm_90+): the kernel may start while the one
  // before it in the stream finishes, and waits for its results itself (griddepcontrol.wait).
  bool programmatic_dependent = false;
};

// A family's plan for one problem on one device: everything the caller must provide (workspace) and
// everything the launcher needs, computed on the host from MlaVerifyProblem alone. Every launch
// rewrites the error word in-stream (mla_verify: from per-CTA slots; the oracle: zeroed first), so a
// captured graph stays correct on replay.
struct MlaVerifyPlan {
  std::string family;          // "mla_verify" or "mla_verify_naive"
  std::string specialization;  // catalog specialization the launch uses
  std::string main_kernel, combine_kernel;  // their name expressions (mla_verify)
  int num_heads = 0;           // what the plan was made for
  MaskKind mask_kind = MaskKind::kBool;
  KvDtype kv_dtype = KvDtype::kBf16;  // what the specialization's split kernel reads
  int tile = 0;                // mla_verify: the split kernel's mla::TileId (0: the device's own)
  int num_splits = 1;          // prefix chunks per request (1 for the oracle)
  size_t workspace_bytes = 0;  // caller allocates at least this much on the launching device
  size_t error_word_offset = 0;  // uint32 MlaVerifyError bits, valid after the launch completes
  KernelGeometry main;         // the attention kernel
  KernelGeometry combine;      // the split merge (unused when num_splits == 1 and the family has none)
  // mla_verify with an fp8 cache in fp8 numerics on sm_90a: the main kernel computes the prefix
  // chunks only (grid z = num_splits) and this launch, between it and the combine, the draft tree
  // (grid z = 1). Empty otherwise (the main kernel's last slab is the tree).
  std::string tree_kernel;
  KernelGeometry tree;
  // The prefix runs fp8 numerics on e4m3 MMAs (whose sums are not fp32's: the tests' tolerance
  // reference::E4m3MmaTolerance applies), with the draft tree as a launch of its own.
  bool e4m3_mma() const { return !tree_kernel.empty(); }
  Fp8Numerics fp8_numerics = Fp8Numerics::kDequant;  // what the plan was made for (fp8 caches)
  int combine_row_parts = 1;   // mla_verify: the combine's layout as traits.h encodes it (CombineIsWide)
  bool half_tiles = false;     // mla_verify: each split CTA covers half its tile's rows (kHalfTileBit)
};

}  // namespace kjit::kernels
