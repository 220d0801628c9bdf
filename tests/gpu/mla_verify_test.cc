// Both MLA verify families (fast "mla_verify" and the oracle "mla_verify_naive") against the float64
// reference on the GPU: random shapes, every golden bundle, determinism, CUDA-graph replay with new
// inputs, out-of-range slots, and small *Sanitize* cases for compute-sanitizer; then the same over an
// fp8 e4m3 cache in both numerics (MlaVerifyFp8Gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>

#include "tests/gpu/mla_gpu_harness.h"
#include "tests/reference/golden.h"

namespace kjit::gputest {
namespace {

using reference::CaseSpec;
using reference::MlaCase;
using reference::TreeKind;

class MlaVerifyGpu : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    const Status& s = GpuRuntime::Get().status;
    ASSERT_TRUE(s.ok()) << "GPU runtime unusable (these tests run only on the GPU machine): " << s;
  }
  const Family& family() const { return GetParam(); }

  // Runs the family on c and checks it against the reference; returns the run for further checks.
  // num_splits > 0 fixes the fast family's prefix chunks.
  RunResult Check(const MlaCase& c, const std::string& label, int num_splits = 0) {
    return CheckAgainstReference(family(), c, label, num_splits);
  }
};

std::string SpecLabel(const CaseSpec& s) {
  std::string l = "seed " + std::to_string(s.seed) + " H " + std::to_string(s.num_heads) + " P/D";
  for (size_t b = 0; b < s.prefix_lens.size(); ++b) {
    // Appended piecewise: "literal" + std::string trips GCC 12's -Wrestrict false positive here.
    l += ' ';
    l += std::to_string(s.prefix_lens[b]);
    l += '/';
    l += std::to_string(s.draft_lens[b]);
  }
  l += s.mask == kernels::MaskKind::kPacked ? " packed" : " bool";
  l += s.is_causal ? " causal" : " noncausal";
  l += " tree " + std::to_string(static_cast<int>(s.tree)) + " pad " + std::to_string(s.padded_requests);
  l += s.scattered ? " scattered" : " contiguous";
  if (s.kv_dtype == kernels::KvDtype::kFp8E4m3) {
    l += s.fp8_numerics == kernels::Fp8Numerics::kFp8 ? " e4m3 fp8-numerics" : " e4m3 dequant";
  }
  return l;
}

// Shapes the fast family supports (H in {8..128}, 1 <= D <= 64, B >= 1), odd sizes included, with
// the float64 reference kept affordable: sum N * H * (P + D) stays near 1e6 per case.
std::vector<CaseSpec> RandomSpecs(int count, uint64_t rng_seed = 20261129, uint64_t first_seed = 1000) {
  std::mt19937_64 rng(rng_seed);
  auto pick = [&rng](uint64_t n) { return static_cast<int>(rng() % n); };
  const int heads[] = {8, 8, 8, 16, 32, 64, 128};
  const int long_prefix[] = {0, 1, 97, 4097, 16411};
  std::vector<CaseSpec> specs;
  for (int i = 0; i < count; ++i) {
    CaseSpec s;
    s.seed = first_seed + i;
    s.num_heads = heads[pick(7)];
    const int batch = 1 + pick(i % 4 == 0 ? 8 : 3);
    const int budget = 1200000 / s.num_heads;
    for (int b = 0; b < batch; ++b) {
      const int d = i % 5 == 0 ? 1 + pick(64) : 1 + pick(17);
      int p = i % 7 == 3 && b == 0 ? long_prefix[pick(5)] : pick(3) == 0 ? pick(3) : pick(2500);
      p = std::min(p, std::max(0, budget / (d * batch) - d));
      s.prefix_lens.push_back(p);
      s.draft_lens.push_back(d);
    }
    s.scattered = pick(4) != 0;
    s.tree = static_cast<TreeKind>(pick(3));
    s.mask = pick(2) ? kernels::MaskKind::kPacked : kernels::MaskKind::kBool;
    s.is_causal = pick(4) != 0;
    s.padded_requests = pick(3) == 0 ? 1 + pick(2) : 0;
    s.padded_draft = 1 + pick(8);
    s.write_lse = pick(5) != 0;
    if (pick(4) == 0) s.k_scale = 0.625f, s.v_scale = 1.5f;
    specs.push_back(s);
  }
  // Long prefixes (several KV tiles and splits), each a few hundred thousand (row, head, key) triples.
  auto fixed = [&specs](uint64_t seed, int h, std::vector<int> p, std::vector<int> d, kernels::MaskKind m, bool sc) {
    CaseSpec s;
    s.seed = seed, s.num_heads = h, s.prefix_lens = std::move(p), s.draft_lens = std::move(d), s.mask = m;
    s.scattered = sc, s.tree = TreeKind::kBushy;
    specs.push_back(s);
  };
  fixed(2001, 8, {4097}, {16}, kernels::MaskKind::kBool, true);
  fixed(2002, 8, {16411}, {4}, kernels::MaskKind::kBool, false);
  fixed(2003, 64, {4097}, {3}, kernels::MaskKind::kPacked, true);
  fixed(2004, 8, {4097, 0}, {7, 64}, kernels::MaskKind::kPacked, true);
  return specs;
}

TEST_P(MlaVerifyGpu, RandomShapesMatchTheFloat64Reference) {
  for (const CaseSpec& s : RandomSpecs(44)) {
    SCOPED_TRACE(SpecLabel(s));
    const RunResult run = Check(reference::MakeCase(s), SpecLabel(s));
    if (!run.o.empty()) {
      EXPECT_EQ(run.error_word, 0u) << SpecLabel(s);
    }
  }
}

TEST_P(MlaVerifyGpu, EveryGoldenBundleMatchesItsStoredOutput) {
  int checked = 0;
  for (const reference::GoldenEntry& e : reference::GoldenCatalog()) {
    const std::string path = reference::GoldenPath(reference::GoldenDir(), e.name);
    StatusOr<reference::GoldenBundle> g = reference::ReadGoldenFile(path);
    ASSERT_TRUE(g.ok()) << g.status() << " (set KJIT_GOLDEN_DIR)";
    StatusOr<RunResult> run = RunOnce(family(), g->c);
    if (g->c.problem.kv_dtype == kernels::KvDtype::kFp8E4m3 && !PlansFp8(family(), GpuRuntime::Get().device)) {
      EXPECT_EQ(run.status().code(), absl::StatusCode::kUnimplemented) << e.name << ": " << run.status();
      ++checked;
      continue;
    }
    ASSERT_TRUE(run.ok()) << e.name << ": " << run.status();
    reference::RefOutput want = reference::Reference(g->c);  // for the per-element bound's o_abs
    ASSERT_EQ(want.o.size(), g->o.size());
    want.o = g->o;  // judge against the committed numbers
    want.lse = g->lse;
    const reference::Comparison cmp = reference::Compare(g->c, want, run->o, run->lse, run->Tolerance());
    EXPECT_TRUE(cmp.ok()) << family().name << " golden " << e.name << "\n" << cmp.Describe();
    EXPECT_EQ(run->error_word, 0u) << e.name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(reference::GoldenCatalog().size()));
}

// Where the plan gives each split CTA half of sm_90a's 64-row tile, every output bit equals the
// whole tiles' (rows are independent in every step), over both masks, several split counts, a
// request whose rows end inside a half and a padded one. Returns how many plans had half tiles.
int ExpectHalfTilesEqualWholeTilesBitwise(const Family& family, CaseSpec s) {
  Family whole = family;
  whole.half_tiles = false;
  GpuRuntime& rt = GpuRuntime::Get();
  int halves = 0;
  s.prefix_lens = {1500, 0, 333}, s.draft_lens = {16, 5, 3}, s.padded_requests = 1, s.padded_draft = 2;
  for (auto mask : {kernels::MaskKind::kBool, kernels::MaskKind::kPacked}) {
    s.mask = mask;
    const MlaCase c = reference::MakeCase(s);
    for (int splits : {0, 1, 2}) {
      StatusOr<kernels::MlaVerifyPlan> plan = PlanFor(family, c, rt.device, splits);
      EXPECT_TRUE(plan.ok()) << plan.status();
      if (!plan.ok()) return halves;
      halves += plan->half_tiles;
      StatusOr<RunResult> got = RunOnce(family, c, splits);
      StatusOr<RunResult> want = RunOnce(whole, c, splits);
      EXPECT_TRUE(got.ok() && want.ok()) << got.status() << " / " << want.status();
      if (!got.ok() || !want.ok()) return halves;
      const std::string at = std::string(family.name) + ", splits " + std::to_string(splits) +
                             (mask == kernels::MaskKind::kBool ? ", bool mask" : ", packed mask");
      EXPECT_TRUE(SameBits(got->o, want->o)) << "o, " << at;
      EXPECT_TRUE(SameBits(got->lse, want->lse)) << "lse, " << at;
      EXPECT_EQ(got->error_word, want->error_word) << at;
    }
  }
  return halves;
}

// How many of those plans should have half tiles: some on sm_90a's own tile, none elsewhere.
void ExpectHalvesWhereTheTileHasThem(const Family& family, int halves) {
  if (family.plan == &kernels::PlanMlaVerify && family.tile == 0 && GpuRuntime::Get().device.cc_major == 9) {
    EXPECT_GT(halves, 0) << "sm_90a plans half tiles for these short prefixes";
  } else {
    EXPECT_EQ(halves, 0) << "half tiles are sm_90a's tile's only";
  }
}

TEST_P(MlaVerifyGpu, HalfTilesEqualWholeTilesBitwise) {
  CaseSpec s;
  s.seed = 95, s.num_heads = 8, s.tree = TreeKind::kRandom;
  ExpectHalvesWhereTheTileHasThem(family(), ExpectHalfTilesEqualWholeTilesBitwise(family(), s));
}

CaseSpec MediumSpec(uint64_t seed) {
  CaseSpec s;
  s.seed = seed, s.num_heads = 8, s.prefix_lens = {3001, 17, 700}, s.draft_lens = {16, 7, 33};
  s.tree = TreeKind::kBushy, s.padded_requests = 1, s.padded_draft = 5;
  return s;
}

TEST_P(MlaVerifyGpu, OutputIsBitwiseIdenticalOverTenRuns) {
  ExpectBitwiseIdenticalRuns(family(), reference::MakeCase(MediumSpec(41)));
}

TEST_P(MlaVerifyGpu, GraphReplayWithNewInputsEqualsEagerBitwise) {
  ExpectGraphReplayEqualsEager(family(), reference::MakeCase(MediumSpec(51)), reference::MakeCase(MediumSpec(52)));
}

// Two problems of different shapes (so their partial states overlap in the shared workspace).
TEST_P(MlaVerifyGpu, BackToBackCallsOnOneWorkspaceEqualIsolatedRuns) {
  CaseSpec b = MediumSpec(54);
  b.num_heads = 16, b.prefix_lens = {12000}, b.draft_lens = {9};
  ExpectBackToBackCallsShareAWorkspace(family(), reference::MakeCase(MediumSpec(53)), reference::MakeCase(b));
}

MlaCase WithOutOfRangeSlots(CaseSpec s) {
  MlaCase c = reference::MakeCase(s);
  c.kv_indices[0] = c.problem.num_slots;             // one past the end
  c.kv_indices[c.kv_indices.size() / 2] = int64_t{1} << 40;  // far away: a read would fault
  return c;
}

TEST_P(MlaVerifyGpu, OutOfRangeSlotSetsTheErrorBitAndIsMasked) {
  CaseSpec s = MediumSpec(61);
  const MlaCase c = WithOutOfRangeSlots(s);
  const RunResult run = Check(c, "out-of-range slots");
  ASSERT_FALSE(run.o.empty());
  EXPECT_TRUE(run.error_word & kernels::kMlaErrKvIndexOutOfRange) << "error word " << run.error_word;
  const RunResult clean = Check(reference::MakeCase(s), "clean");
  EXPECT_EQ(clean.error_word, 0u) << "the error word must be zeroed by the launch";
}

// A kv_indices entry of INT64_MIN (the kernels' own past-the-end sentinel) is an out-of-range slot
// like any other: masked and reported, not taken for the end of the chunk.
TEST_P(MlaVerifyGpu, ASlotOfInt64MinIsReportedAsOutOfRange) {
  MlaCase c = reference::MakeCase(MediumSpec(62));
  c.kv_indices[c.kv_indices.size() / 3] = std::numeric_limits<int64_t>::min();
  const RunResult run = Check(c, "an INT64_MIN slot");
  ASSERT_FALSE(run.o.empty());
  EXPECT_EQ(run.error_word, kernels::kMlaErrKvIndexOutOfRange);
}

// One captured graph replayed over inputs with and without an out-of-range slot: each replay's error
// word is its own (the workspace is re-poisoned before each input).
TEST_P(MlaVerifyGpu, EachGraphReplayReportsItsOwnErrors) {
  GpuRuntime& rt = GpuRuntime::Get();
  const CaseSpec s = MediumSpec(63);
  const MlaCase clean = reference::MakeCase(s), bad = WithOutOfRangeSlots(s);
  StatusOr<kernels::MlaVerifyPlan> plan = PlanFor(family(), clean, rt.device);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto d = DeviceCase::Create(bad, plan->workspace_bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  CUstream stream = rt.stream->get();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_TRUE(driver::Check(rt.api->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "capture").ok());
  const Status launched = family().launch(*rt.kernels, *plan, clean.problem, (*d)->Buffers(true), stream);
  ASSERT_TRUE(driver::Check(rt.api->cuStreamEndCapture(stream, &graph), "end capture").ok());
  ASSERT_TRUE(launched.ok()) << launched;
  ASSERT_TRUE(driver::Check(rt.api->cuGraphInstantiate(&exec, graph, 0), "instantiate").ok());
  for (const MlaCase* c : {&bad, &clean, &clean, &bad, &clean}) {
    ASSERT_TRUE((*d)->Upload(*c).ok());
    for (int replay = 0; replay < 3; ++replay) {  // the second and third on the workspace the first left
      ASSERT_TRUE(driver::Check(rt.api->cuGraphLaunch(exec, stream), "graph launch").ok());
      ASSERT_TRUE(rt.stream->Synchronize().ok());
      RunResult r;
      ASSERT_TRUE((*d)->Download(&r.o, &r.lse, &r.error_word, plan->error_word_offset).ok());
      EXPECT_EQ(r.error_word, c == &bad ? kernels::kMlaErrKvIndexOutOfRange : 0u) << "replay " << replay;
    }
  }
  rt.api->cuGraphExecDestroy(exec);
  rt.api->cuGraphDestroy(graph);
}

TEST_P(MlaVerifyGpu, EverySplitCountMatchesTheReference) {
  MlaCase c = reference::MakeCase(MediumSpec(81));
  for (int splits : {1, 2, 3, 7, 64}) {  // the oracle ignores the hint; the fast family must not care
    Check(c, "num_splits " + std::to_string(splits), splits);
  }
}

// Row maxima that jump within one prefix chunk (one split, so one CTA runs every tile): key i of
// the prefix (counted over kv_indices) is scaled by 1 + i / 160, and every 293rd by 64 more. The
// maxima climb past what the lazy online softmax keeps (2^8) now and then, and a spike passes them
// by hundreds (log2 units), while most tiles keep them. A kernel that kept a running max across
// such a spike would overflow exp2 (inf, NaN); one that moved it without rescaling O would be off
// by far more than the tolerance. (The 32x32 tile decides per tile whether the maxima may move; the
// sm_90a fp8 kernel passes them between its warpgroups within a pair of tiles.) With an fp8 cache the
// scaled keys are rounded to e4m3 again (saturating at 448).
CaseSpec JumpingMaximaSpec(int heads) {
  CaseSpec s;
  s.seed = 131 + heads, s.num_heads = heads, s.prefix_lens = {heads == 8 ? 3001 : 1111, 45}, s.draft_lens = {6, 3};
  s.mask = heads == 8 ? kernels::MaskKind::kBool : kernels::MaskKind::kPacked, s.tree = TreeKind::kBushy;
  return s;
}

void ScaleKeysSoThatMaximaJump(MlaCase& c) {
  const bool fp8 = !c.kv_cache_fp8.empty();
  std::vector<bool> scaled(static_cast<size_t>(c.problem.num_slots), false);
  int64_t key = 0;
  for (int b = 0; b < c.batch(); ++b) {
    for (int64_t j = c.kv_indptr[b]; j < c.kv_indptr[b + 1]; ++j, ++key) {
      const int64_t slot = c.kv_indices[j];
      if (slot < 0 || slot >= c.problem.num_slots || scaled[slot]) continue;
      scaled[slot] = true;
      const float f = (1.f + static_cast<float>(key) / 160.f) * (key % 293 == 7 ? 64.f : 1.f);
      for (int d = 0; d < kernels::kMlaKDim; ++d) {
        if (fp8) {
          uint8_t& v = c.kv_cache_fp8[slot * kernels::kMlaKDim + d];
          v = reference::DoubleToE4m3(reference::E4m3ToDouble(v) * f);
        } else {
          uint16_t& v = c.kv_cache[slot * kernels::kMlaKDim + d];
          v = reference::FloatToBf16(reference::Bf16ToFloat(v) * f);
        }
      }
    }
  }
}

TEST_P(MlaVerifyGpu, RowMaximaThatJumpWithinAChunkMatchTheReference) {
  for (int heads : {8, 64}) {
    MlaCase c = reference::MakeCase(JumpingMaximaSpec(heads));
    ScaleKeysSoThatMaximaJump(c);
    for (int splits : {1, 3}) Check(c, "H " + std::to_string(heads) + " num_splits " + std::to_string(splits), splits);
  }
}

// Few rows and many states: the combine's wide layouts, one and two CTAs per row (the plan takes two
// while the rows twice over fit the SMs), at the boundary state counts 32 (one slice per row) and 33.
TEST_P(MlaVerifyGpu, WideCombineOverOneAndTwoCtasPerRowMatchesTheReference) {
  CaseSpec s;
  s.seed = 97, s.num_heads = 8, s.prefix_lens = {4097}, s.draft_lens = {5}, s.mask = kernels::MaskKind::kPacked;
  s.tree = TreeKind::kBushy, s.write_lse = true;
  MlaCase c = reference::MakeCase(s);
  for (int splits : {31, 32, 64}) {
    Check(c, "num_splits " + std::to_string(splits), splits);
  }
  s.prefix_lens = {4097, 3000, 0}, s.draft_lens = {16, 16, 3};  // 3 x 128 rows: one CTA per row
  MlaCase big = reference::MakeCase(s);
  Check(big, "three requests, num_splits 64", 64);
}

// The same case with row strides larger than the rows (q, k_extend, o), as a caller slicing bigger
// tensors passes them.
MlaCase WithPaddedStrides(const MlaCase& dense) {
  MlaCase c = dense;
  auto& p = c.problem;
  const int64_t h = p.num_heads, n = p.num_q;
  p.q_stride_n = h * kernels::kMlaKDim + 64;
  p.k_extend_stride_n = kernels::kMlaKDim + 8;
  p.o_stride_n = h * kernels::kMlaVDim + 32;
  c.q.assign(n * p.q_stride_n, reference::FloatToBf16(1e30f));  // gaps hold values no kernel may read
  c.k_extend.assign(n * p.k_extend_stride_n, reference::FloatToBf16(1e30f));
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(dense.q.begin() + i * h * kernels::kMlaKDim, h * kernels::kMlaKDim, c.q.begin() + i * p.q_stride_n);
    std::copy_n(dense.k_extend.begin() + i * kernels::kMlaKDim, kernels::kMlaKDim,
                c.k_extend.begin() + i * p.k_extend_stride_n);
  }
  return c;
}

// The strided run's rows equal the dense run's bitwise, and the gaps between them keep their poison.
void ExpectStridedRowsEqualDense(const MlaCase& dense, const MlaCase& strided, const RunResult& a,
                                 const RunResult& b) {
  ASSERT_FALSE(a.o.empty() || b.o.empty());
  const int64_t row = static_cast<int64_t>(dense.problem.num_heads) * kernels::kMlaVDim;
  for (int64_t n = 0; n < dense.problem.num_q; ++n) {
    if (dense.row_is_padding[n]) continue;
    ASSERT_EQ(std::memcmp(&a.o[n * row], &b.o[n * strided.problem.o_stride_n], row * 2), 0) << "row " << n;
    for (int64_t i = row; i < strided.problem.o_stride_n; ++i) {
      ASSERT_EQ(b.o[n * strided.problem.o_stride_n + i], 0xFFFF) << "wrote into the gap after row " << n;
    }
  }
}

TEST_P(MlaVerifyGpu, RowStridesLargerThanTheRowsAreHonored) {
  const MlaCase dense = reference::MakeCase(MediumSpec(91));
  const MlaCase strided = WithPaddedStrides(dense);
  const RunResult a = Check(dense, "dense");
  const RunResult b = Check(strided, "strided");
  ExpectStridedRowsEqualDense(dense, strided, a, b);
}

CaseSpec SmallSpec(uint64_t seed, kernels::MaskKind mask) {
  CaseSpec s;
  s.seed = seed, s.num_heads = 8, s.prefix_lens = {0, 97, 5}, s.draft_lens = {7, 1, 33};
  s.tree = TreeKind::kRandom, s.mask = mask, s.padded_requests = 1, s.padded_draft = 3;
  return s;
}

// Every row of every partial state that the combine may merge (rows_cap = max_draft * H per state)
// is written by each launch: this launch's state, or an empty one where the request leaves the row
// uncovered. So where the combine's read of the index pointers differs from the split kernel's (a
// client rewriting them during an asynchronous launch), it still merges nothing that an earlier
// launch, another client's, left in the shared workspace. The workspace starts poisoned (0xAB
// bytes); max_draft 64 leaves most rows of the small case's requests uncovered, and a request whose
// bounds are bad covers none.
TEST_P(MlaVerifyGpu, EveryStateRowIsWrittenByEveryLaunch) {
  GpuRuntime& rt = GpuRuntime::Get();
  for (bool bad_request : {false, true}) {
    MlaCase c = reference::MakeCase(SmallSpec(75, kernels::MaskKind::kBool));
    c.problem.max_draft = 64;
    if (bad_request) c.qo_indptr[2] = c.qo_indptr[1] - 1;  // request 1 ends before it starts
    StatusOr<kernels::MlaVerifyPlan> plan = PlanFor(family(), c, rt.device);
    ASSERT_TRUE(plan.ok()) << plan.status();
    if (plan->family != kernels::kMlaVerifyFamily) return;  // the oracle keeps no partial states
    auto d = DeviceCase::Create(c, plan->workspace_bytes);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE(family().launch(*rt.kernels, *plan, c.problem, (*d)->Buffers(true), rt.stream->get()).ok());
    ASSERT_TRUE(rt.stream->Synchronize().ok());
    StatusOr<kernels::MlaVerifyWorkspaceLayout> ws = kernels::MlaVerifyWorkspace(c.problem, plan->num_splits);
    ASSERT_TRUE(ws.ok()) << ws.status();
    std::vector<uint8_t> bytes;
    ASSERT_TRUE((*d)->DownloadWorkspace(&bytes, ws->part_o_offset).ok());
    const size_t rows_cap = static_cast<size_t>(c.problem.max_draft) * c.problem.num_heads;
    const size_t states = static_cast<size_t>(c.problem.batch) * (plan->num_splits + 1);
    size_t stale = 0, first_stale = 0;
    for (size_t i = 0; i < states * rows_cap; ++i) {
      uint32_t bits;
      std::memcpy(&bits, bytes.data() + ws->part_lse_offset + 4 * i, 4);
      if (bits == 0xABABABABu && stale++ == 0) first_stale = i;
    }
    EXPECT_EQ(stale, 0u) << (bad_request ? "with a bad request: " : "") << stale << " of " << states * rows_cap
                         << " state rows kept the poison, the first at state " << first_stale / rows_cap << " row "
                         << first_stale % rows_cap;
  }
}

TEST_P(MlaVerifyGpu, SanitizeSmallCasesBothMasks) {
  for (auto mask : {kernels::MaskKind::kBool, kernels::MaskKind::kPacked}) {
    const CaseSpec s = SmallSpec(71, mask);
    Check(reference::MakeCase(s), SpecLabel(s));
  }
}

// One chunk of several KV tiles: the split kernels' pipelines (stages, index ring, and on sm_90 the
// hand-over between warpgroups) go round more than once under the sanitizers.
TEST_P(MlaVerifyGpu, SanitizeOneSplitOverSeveralTiles) {
  CaseSpec s = SmallSpec(74, kernels::MaskKind::kPacked);
  s.prefix_lens = {300, 5, 0};
  MlaCase c = reference::MakeCase(s);
  Check(c, "one split, five tiles", 1);
}

// The combine's wide layouts under the sanitizers: 33 states, one request of 16 rows (two CTAs per
// row) and one of 64 beside a padded one (one CTA per row).
TEST_P(MlaVerifyGpu, SanitizeWideCombine) {
  CaseSpec s = SmallSpec(75, kernels::MaskKind::kPacked);
  s.prefix_lens = {2200}, s.draft_lens = {2}, s.padded_requests = 0;
  MlaCase c = reference::MakeCase(s);
  Check(c, "16 rows, 33 states", 32);
  s.prefix_lens = {2200, 40}, s.draft_lens = {8, 3}, s.padded_requests = 1;
  MlaCase two = reference::MakeCase(s);
  Check(two, "64 rows, 33 states", 32);
}

TEST_P(MlaVerifyGpu, SanitizeOutOfRangeSlot) {
  const RunResult run = Check(WithOutOfRangeSlots(SmallSpec(72, kernels::MaskKind::kBool)), "small out-of-range");
  ASSERT_FALSE(run.o.empty());
  EXPECT_TRUE(run.error_word & kernels::kMlaErrKvIndexOutOfRange);
}

// mask_indptr is client data that reaches the kernels unchecked on the in-process and asynchronous
// paths: values whose sums with the request's extent overflow must be reported, never read through.
TEST_P(MlaVerifyGpu, SanitizeHugeMaskIndptrIsReportedNotRead) {
  for (int64_t start : {std::numeric_limits<int64_t>::max() - 3, std::numeric_limits<int64_t>::min() + 1,
                        int64_t{1} << 62}) {
    MlaCase c = reference::MakeCase(SmallSpec(73, kernels::MaskKind::kBool));
    c.mask_indptr[0] = start;
    StatusOr<RunResult> run = RunOnce(family(), c);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_TRUE(run->error_word & kernels::kMlaErrBadIndptr) << "mask_indptr[0] = " << start << ", error word "
                                                             << run->error_word;
  }
}

// Every family plans an fp8 cache, except the 64x64 mma.sync tile, which has no fp8 variant, and the
// 32x32 tile below compute capability 9: their plans (and so a run) must refuse one with
// UNIMPLEMENTED (a client falls back).
// The fast family's launch refuses a plan made for the other cache type, which would read the cache's bytes as the wrong element type.
TEST_P(MlaVerifyGpu, Fp8CacheIsPlannedOrRefusedAsUnimplemented) {
  GpuRuntime& rt = GpuRuntime::Get();
  for (auto numerics : {kernels::Fp8Numerics::kDequant, kernels::Fp8Numerics::kFp8}) {
    CaseSpec s = SmallSpec(76, kernels::MaskKind::kPacked);
    s.kv_dtype = kernels::KvDtype::kFp8E4m3, s.fp8_numerics = numerics;
    const MlaCase c = reference::MakeCase(s);
    StatusOr<kernels::MlaVerifyPlan> plan = PlanFor(family(), c, rt.device);
    if (!PlansFp8(family(), rt.device)) {
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented) << plan.status();
      EXPECT_EQ(RunOnce(family(), c).status().code(), absl::StatusCode::kUnimplemented);
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->kv_dtype, kernels::KvDtype::kFp8E4m3);
    if (plan->family != kernels::kMlaVerifyFamily) continue;
    s.kv_dtype = kernels::KvDtype::kBf16;
    const MlaCase bf16 = reference::MakeCase(s);
    StatusOr<kernels::MlaVerifyPlan> bf16_plan = PlanFor(family(), bf16, rt.device);
    ASSERT_TRUE(bf16_plan.ok()) << bf16_plan.status();
    auto d = DeviceCase::Create(c, std::max(plan->workspace_bytes, bf16_plan->workspace_bytes));
    ASSERT_TRUE(d.ok()) << d.status();
    const kernels::MlaVerifyBuffers bufs = (*d)->Buffers(true);
    EXPECT_EQ(family().launch(*rt.kernels, *bf16_plan, c.problem, bufs, rt.stream->get()).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(family().launch(*rt.kernels, *plan, bf16.problem, bufs, rt.stream->get()).code(),
              absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(rt.stream->Synchronize().ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MlaVerifyGpu, ::testing::Values(kFast, kFastTile32x16, kFastTile64x64, kFastTileQReg32x32, kNaive),
                         [](const ::testing::TestParamInfo<Family>& info) { return std::string(info.param.name); });

// ---- fp8 e4m3 cache: every family that plans one, in both numerics ----

class MlaVerifyFp8Gpu : public ::testing::TestWithParam<std::tuple<Family, kernels::Fp8Numerics>> {
 protected:
  void SetUp() override {
    const Status& s = GpuRuntime::Get().status;
    ASSERT_TRUE(s.ok()) << "GPU runtime unusable (these tests run only on the GPU machine): " << s;
    if (!PlansFp8(family(), GpuRuntime::Get().device))
      GTEST_SKIP() << family().name << " refuses an fp8 cache on this device (MlaVerifyGpu."
                   << "Fp8CacheIsPlannedOrRefusedAsUnimplemented checks the refusal)";
  }
  const Family& family() const { return std::get<0>(GetParam()); }
  kernels::Fp8Numerics numerics() const { return std::get<1>(GetParam()); }
  // s over an fp8 cache in this test's numerics.
  CaseSpec Fp8(CaseSpec s) const {
    s.kv_dtype = kernels::KvDtype::kFp8E4m3;
    s.fp8_numerics = numerics();
    return s;
  }
  MlaCase Fp8Case(const CaseSpec& s) const { return reference::MakeCase(Fp8(s)); }
  RunResult Check(const MlaCase& c, const std::string& label, int num_splits = 0,
                  reference::Comparison* cmp = nullptr) {
    return CheckAgainstReference(family(), c, label, num_splits, cmp);
  }
};

// H 8 and 64 (and the other supported counts), D 1/7/16/33/64, P 0/1/odd/4097, batches whose
// requests have different P_b, both mask kinds, padded requests, non-causal trees, contiguous
// slots; then random shapes drawn as for the bf16 cache.
std::vector<CaseSpec> Fp8Specs() {
  std::vector<CaseSpec> specs;
  auto add = [&specs](uint64_t seed, int h, std::vector<int> p, std::vector<int> d, TreeKind tree,
                      kernels::MaskKind mask) -> CaseSpec& {
    CaseSpec s;
    s.seed = seed, s.num_heads = h, s.prefix_lens = std::move(p), s.draft_lens = std::move(d);
    s.tree = tree, s.mask = mask;
    specs.push_back(s);
    return specs.back();
  };
  using kernels::MaskKind;
  add(3001, 8, {0}, {7}, TreeKind::kChain, MaskKind::kBool);
  add(3002, 8, {1}, {1}, TreeKind::kChain, MaskKind::kPacked);
  add(3003, 64, {97}, {16}, TreeKind::kBushy, MaskKind::kBool);
  add(3004, 8, {4097}, {16}, TreeKind::kBushy, MaskKind::kPacked);
  add(3005, 64, {4097}, {3}, TreeKind::kChain, MaskKind::kBool).scattered = false;
  add(3006, 8, {33}, {64}, TreeKind::kRandom, MaskKind::kPacked).is_causal = false;
  CaseSpec& mixed = add(3007, 8, {0, 1, 97, 4097, 5, 130}, {1, 7, 33, 2, 16, 3}, TreeKind::kBushy, MaskKind::kBool);
  mixed.padded_requests = 2, mixed.padded_draft = 4;
  add(3008, 64, {1, 255, 17}, {33, 1, 7}, TreeKind::kRandom, MaskKind::kPacked).write_lse = false;
  add(3009, 8, {1023, 2}, {64, 5}, TreeKind::kChain, MaskKind::kBool);
  add(3010, 16, {511}, {5}, TreeKind::kBushy, MaskKind::kPacked);
  add(3011, 32, {300, 0}, {4, 9}, TreeKind::kRandom, MaskKind::kBool);
  add(3012, 128, {100}, {2}, TreeKind::kChain, MaskKind::kPacked);
  for (const CaseSpec& s : RandomSpecs(10, 20261201, 5000)) specs.push_back(s);
  return specs;
}

TEST_P(MlaVerifyFp8Gpu, RandomShapesMatchTheFloat64Reference) {
  for (const CaseSpec& spec : Fp8Specs()) {
    const CaseSpec s = Fp8(spec);
    SCOPED_TRACE(SpecLabel(s));
    const RunResult run = Check(reference::MakeCase(s), SpecLabel(s));
    if (!run.o.empty()) {
      EXPECT_EQ(run.error_word, 0u) << SpecLabel(s);
    }
  }
}

// Every finite e4m3 value in V (q zero on the value dims: the scores come from the rope dims, so the
// weights stay spread over the keys), then in every dim of K and V (scores of hundreds: o is the
// value row of the key that wins, with every code in it).
TEST_P(MlaVerifyFp8Gpu, HalfTilesEqualWholeTilesBitwise) {
  if (!PlansFp8(family(), GpuRuntime::Get().device)) GTEST_SKIP() << "no fp8 cache in this family";
  CaseSpec s;
  s.seed = 96, s.num_heads = 8, s.tree = TreeKind::kRandom;
  ExpectHalvesWhereTheTileHasThem(family(), ExpectHalfTilesEqualWholeTilesBitwise(family(), Fp8(s)));
}

TEST_P(MlaVerifyFp8Gpu, EveryE4m3CodeDecodesExactly) {
  CaseSpec s;
  s.seed = 3101, s.num_heads = 8, s.prefix_lens = {300, 41}, s.draft_lens = {4, 2}, s.tree = TreeKind::kBushy;
  MlaCase values = Fp8Case(s);
  reference::WriteEveryE4m3Code(values, 0, kernels::kMlaVDim);
  for (int64_t n = 0; n < values.problem.num_q; ++n) {
    for (int h = 0; h < values.problem.num_heads; ++h) {
      uint16_t* q = values.q.data() + n * values.problem.q_stride_n + h * values.problem.q_stride_h;
      std::fill(q, q + kernels::kMlaVDim, reference::FloatToBf16(0.f));
    }
  }
  const RunResult v = Check(values, "every code in V");
  EXPECT_EQ(v.error_word, 0u);
  MlaCase keys = Fp8Case(s);
  reference::WriteEveryE4m3Code(keys, 0, kernels::kMlaKDim);
  // Scores in the hundreds: on e4m3 MMAs (sm_90a's fp8 numerics) their sums' error moves the
  // weights past the emulation's global limit (reference::Tolerance::e4m3_mma_accumulation); every
  // element and lse must still be finite and within its own bound there.
  StatusOr<RunResult> k = RunOnce(family(), keys);
  ASSERT_TRUE(k.ok()) << k.status();
  const reference::Comparison cmp = reference::Compare(keys, reference::Reference(keys), k->o, k->lse, k->Tolerance());
  EXPECT_TRUE(k->e4m3_mma ? cmp.nan_count == 0 && cmp.bad_elements == 0 && cmp.lse_bad == 0 : cmp.ok())
      << family().name << " every code in K and V\n" << cmp.Describe();
  EXPECT_EQ(k->error_word, 0u);
}

TEST_P(MlaVerifyFp8Gpu, KScaleHalfAndVScaleTwoMatchTheReference) {
  CaseSpec s = MediumSpec(3201);
  s.k_scale = 0.5f, s.v_scale = 2.0f;
  const RunResult scaled = Check(Fp8Case(s), "k_scale 0.5, v_scale 2");
  const RunResult plain = Check(Fp8Case(MediumSpec(3201)), "k_scale 1, v_scale 1");
  ASSERT_FALSE(scaled.o.empty() || plain.o.empty());
  EXPECT_NE(scaled.o, plain.o) << "the scales did not reach the kernel";
}

TEST_P(MlaVerifyFp8Gpu, OutOfRangeSlotSetsTheErrorBitAndIsMasked) {
  const RunResult run = Check(WithOutOfRangeSlots(Fp8(MediumSpec(3301))), "out-of-range slots");
  ASSERT_FALSE(run.o.empty());
  EXPECT_TRUE(run.error_word & kernels::kMlaErrKvIndexOutOfRange) << "error word " << run.error_word;
  const RunResult clean = Check(Fp8Case(MediumSpec(3301)), "clean");
  EXPECT_EQ(clean.error_word, 0u) << "the error word must be zeroed by the launch";
}

TEST_P(MlaVerifyFp8Gpu, EverySplitCountMatchesTheReference) {
  const MlaCase c = Fp8Case(MediumSpec(3401));
  for (int splits : {1, 2, 3, 7, 33, 64}) {  // the oracle ignores the hint
    Check(c, "num_splits " + std::to_string(splits), splits);
  }
}

// JumpingMaximaSpec over an fp8 cache: odd and even tile counts in one CTA (47 and 18 tiles with
// one split), one tile, and chunks of three splits.
TEST_P(MlaVerifyFp8Gpu, RowMaximaThatJumpWithinAChunkMatchTheReference) {
  for (int heads : {8, 64}) {
    MlaCase c = Fp8Case(JumpingMaximaSpec(heads));
    ScaleKeysSoThatMaximaJump(c);
    for (int splits : {1, 3}) Check(c, "H " + std::to_string(heads) + " num_splits " + std::to_string(splits), splits);
  }
}

TEST_P(MlaVerifyFp8Gpu, OutputIsBitwiseIdenticalOverTenRuns) {
  ExpectBitwiseIdenticalRuns(family(), Fp8Case(MediumSpec(3501)));
}

TEST_P(MlaVerifyFp8Gpu, GraphReplayWithNewInputsEqualsEagerBitwise) {
  ExpectGraphReplayEqualsEager(family(), Fp8Case(MediumSpec(3601)), Fp8Case(MediumSpec(3602)));
}

TEST_P(MlaVerifyFp8Gpu, RowStridesLargerThanTheRowsAreHonored) {
  const MlaCase dense = Fp8Case(MediumSpec(3701));
  const MlaCase strided = WithPaddedStrides(dense);
  const RunResult a = Check(dense, "dense");
  const RunResult b = Check(strided, "strided");
  ExpectStridedRowsEqualDense(dense, strided, a, b);
}

// The error of each numerics against the exact float64 math on a K1-like shape, printed for the
// record. fp8 numerics round q to e4m3 (about 2^-5 relative per element): the emulation sits several
// times its own limit away from the exact math, so a kernel that follows the numerics is nearer the
// emulation than the exact math, and one that skips a rounding is not. Dequant is held to the bf16
// bounds against the exact math.
TEST_P(MlaVerifyFp8Gpu, ErrorAgainstTheExactMathIsMeasured) {
  CaseSpec s;
  s.seed = 3801, s.num_heads = 8, s.prefix_lens = {4097}, s.draft_lens = {16}, s.tree = TreeKind::kBushy;
  reference::Comparison cmp;
  const RunResult run = Check(Fp8Case(s), "H 8, D 16, P 4097", 0, &cmp);
  ASSERT_FALSE(run.o.empty());
  const bool fp8 = numerics() == kernels::Fp8Numerics::kFp8;
  std::printf("[ fp8 cache ] %s, %s numerics, H 8 D 16 P 4097: rel Frobenius vs the exact math %.3e, vs the "
              "numerics' emulation %.3e (the emulation vs the exact math: %.3e)\n",
              family().name, fp8 ? "fp8" : "dequant", cmp.rel_frobenius_exact, cmp.rel_frobenius,
              cmp.numerics_rel_frobenius);
  RecordProperty("rel_frobenius_exact", std::to_string(cmp.rel_frobenius_exact));
  RecordProperty("rel_frobenius_numerics", std::to_string(cmp.rel_frobenius));
  if (fp8) {
    EXPECT_GT(cmp.numerics_rel_frobenius, 5 * 4e-3) << "q and P in e4m3 should be far coarser than bf16";
    EXPECT_GT(cmp.numerics_rel_frobenius, 2 * cmp.max_rel_frob) << "the case no longer tells the numerics apart";
    EXPECT_LT(cmp.rel_frobenius, cmp.rel_frobenius_exact) << "the kernel does not follow the fp8 numerics";
  }
}

// Which kernel fp8 numerics plan: e4m3 MMAs on sm_90's own tile, unless the family asks for the
// emulating kernel; dequant and the other tiles never plan them.
TEST_P(MlaVerifyFp8Gpu, E4m3MmasArePlannedOnlyOnSm90aOwnTile) {
  GpuRuntime& rt = GpuRuntime::Get();
  const MlaCase c = Fp8Case(MediumSpec(3811));
  StatusOr<kernels::MlaVerifyPlan> plan = PlanFor(family(), c, rt.device);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->e4m3_mma(), numerics() == kernels::Fp8Numerics::kFp8 && family().plan == &kernels::PlanMlaVerify &&
                                  family().tile == 0 && family().fp8_mma && rt.device.cc_major == 9);
}

TEST_P(MlaVerifyFp8Gpu, BackToBackCallsOnOneWorkspaceEqualIsolatedRuns) {
  CaseSpec b = MediumSpec(3821);
  b.num_heads = 16, b.prefix_lens = {12000}, b.draft_lens = {9};
  ExpectBackToBackCallsShareAWorkspace(family(), Fp8Case(MediumSpec(3822)), Fp8Case(b));
}

TEST_P(MlaVerifyFp8Gpu, SanitizeSmallCasesBothMasks) {
  for (auto mask : {kernels::MaskKind::kBool, kernels::MaskKind::kPacked}) {
    const CaseSpec s = Fp8(SmallSpec(3901, mask));
    Check(reference::MakeCase(s), SpecLabel(s));
  }
}

TEST_P(MlaVerifyFp8Gpu, SanitizeOutOfRangeSlotAndSeveralTiles) {
  CaseSpec s = Fp8(SmallSpec(3902, kernels::MaskKind::kBool));
  s.prefix_lens = {300, 5, 0};
  const RunResult run = Check(WithOutOfRangeSlots(s), "small out-of-range, one split", 1);
  ASSERT_FALSE(run.o.empty());
  EXPECT_TRUE(run.error_word & kernels::kMlaErrKvIndexOutOfRange);
}

std::string Fp8ParamName(const ::testing::TestParamInfo<std::tuple<Family, kernels::Fp8Numerics>>& info) {
  const bool fp8 = std::get<1>(info.param) == kernels::Fp8Numerics::kFp8;
  return std::string(std::get<0>(info.param).name) + (fp8 ? "_fp8" : "_dequant");
}

INSTANTIATE_TEST_SUITE_P(
    Families, MlaVerifyFp8Gpu,
    ::testing::Combine(::testing::Values(kFast, kFastTile32x16, kFastTileQReg32x32, kNaive),
                       ::testing::Values(kernels::Fp8Numerics::kDequant, kernels::Fp8Numerics::kFp8)),
    Fp8ParamName);
// fp8 numerics on the emulating kernel where the fast family runs e4m3 MMAs (sm_90a).
INSTANTIATE_TEST_SUITE_P(Emulated, MlaVerifyFp8Gpu,
                         ::testing::Combine(::testing::Values(kFastFp8Emulated), ::testing::Values(kernels::Fp8Numerics::kFp8)),
                         Fp8ParamName);

}  // namespace
}  // namespace kjit::gputest
