// Both MLA verify families (fast "mla_verify" and the oracle "mla_verify_naive") against the float64
// reference on the GPU: random shapes, every golden bundle, determinism, CUDA-graph replay with new
// inputs, out-of-range slots, and small *Sanitize* cases for compute-sanitizer.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <limits>
#include <string>

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
    StatusOr<RunResult> run = RunOnce(family(), c, num_splits);
    EXPECT_TRUE(run.ok()) << label << ": " << run.status();
    if (!run.ok()) return {};
    const reference::RefOutput want = reference::Reference(c);
    const reference::Comparison cmp = reference::Compare(c, want, run->o, run->lse);
    EXPECT_TRUE(cmp.ok()) << family().name << " " << label << "\n" << cmp.Describe();
    return *run;
  }
};

std::string SpecLabel(const CaseSpec& s) {
  std::string l = "seed " + std::to_string(s.seed) + " H " + std::to_string(s.num_heads) + " P/D";
  for (size_t b = 0; b < s.prefix_lens.size(); ++b) {
    l += " " + std::to_string(s.prefix_lens[b]) + "/" + std::to_string(s.draft_lens[b]);
  }
  l += s.mask == kernels::MaskKind::kPacked ? " packed" : " bool";
  l += s.is_causal ? " causal" : " noncausal";
  l += " tree " + std::to_string(static_cast<int>(s.tree)) + " pad " + std::to_string(s.padded_requests);
  l += s.scattered ? " scattered" : " contiguous";
  return l;
}

// Shapes the fast family supports (H in {8..128}, 1 <= D <= 64, B >= 1), odd sizes included, with
// the float64 reference kept affordable: sum N * H * (P + D) stays near 1e6 per case.
std::vector<CaseSpec> RandomSpecs(int count) {
  std::mt19937_64 rng(20261129);
  auto pick = [&rng](uint64_t n) { return static_cast<int>(rng() % n); };
  const int heads[] = {8, 8, 8, 16, 32, 64, 128};
  const int long_prefix[] = {0, 1, 97, 4097, 16411};
  std::vector<CaseSpec> specs;
  for (int i = 0; i < count; ++i) {
    CaseSpec s;
    s.seed = 1000 + i;
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
    ASSERT_TRUE(run.ok()) << e.name << ": " << run.status();
    reference::RefOutput want = reference::Reference(g->c);  // for the per-element bound's o_abs
    ASSERT_EQ(want.o.size(), g->o.size());
    want.o = g->o;  // judge against the committed numbers
    want.lse = g->lse;
    const reference::Comparison cmp = reference::Compare(g->c, want, run->o, run->lse);
    EXPECT_TRUE(cmp.ok()) << family().name << " golden " << e.name << "\n" << cmp.Describe();
    EXPECT_EQ(run->error_word, 0u) << e.name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(reference::GoldenCatalog().size()));
}

CaseSpec MediumSpec(uint64_t seed) {
  CaseSpec s;
  s.seed = seed, s.num_heads = 8, s.prefix_lens = {3001, 17, 700}, s.draft_lens = {16, 7, 33};
  s.tree = TreeKind::kBushy, s.padded_requests = 1, s.padded_draft = 5;
  return s;
}

TEST_P(MlaVerifyGpu, OutputIsBitwiseIdenticalOverTenRuns) {
  const MlaCase c = reference::MakeCase(MediumSpec(41));
  RunResult first = Check(c, "first run");
  ASSERT_FALSE(first.o.empty());
  for (int i = 1; i < 10; ++i) {
    StatusOr<RunResult> again = RunOnce(family(), c);
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_EQ(std::memcmp(again->o.data(), first.o.data(), first.o.size() * 2), 0) << "o differs in run " << i;
    ASSERT_EQ(std::memcmp(again->lse.data(), first.lse.data(), first.lse.size() * 4), 0) << "lse differs in run " << i;
  }
}

TEST_P(MlaVerifyGpu, GraphReplayWithNewInputsEqualsEagerBitwise) {
  GpuRuntime& rt = GpuRuntime::Get();
  const MlaCase a = reference::MakeCase(MediumSpec(51));
  const MlaCase b = reference::MakeCase(MediumSpec(52));  // same sizes, other values, slots and tree
  ASSERT_EQ(a.q.size(), b.q.size());
  const kernels::MlaVerifyProblem& problem = a.problem;
  StatusOr<kernels::MlaVerifyPlan> plan = PlanFor(family(), a, rt.device);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto d = DeviceCase::Create(a, plan->workspace_bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  const kernels::MlaVerifyBuffers bufs = (*d)->Buffers(true);
  CUstream stream = rt.stream->get();

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_TRUE(driver::Check(rt.api->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "capture").ok());
  const Status launched = family().launch(*rt.kernels, *plan, problem, bufs, stream);
  const Status ended = driver::Check(rt.api->cuStreamEndCapture(stream, &graph), "end capture");
  ASSERT_TRUE(launched.ok()) << launched;
  ASSERT_TRUE(ended.ok()) << ended;
  ASSERT_TRUE(driver::Check(rt.api->cuGraphInstantiate(&exec, graph, 0), "instantiate").ok());

  RunResult replayed;
  for (const MlaCase* c : {&a, &b}) {  // replay on the captured inputs, then on new ones
    ASSERT_TRUE((*d)->Upload(*c).ok());
    ASSERT_TRUE(driver::Check(rt.api->cuGraphLaunch(exec, stream), "graph launch").ok());
    ASSERT_TRUE(rt.stream->Synchronize().ok());
    ASSERT_TRUE((*d)->Download(&replayed.o, &replayed.lse, &replayed.error_word, plan->error_word_offset).ok());
    const RunResult eager = Check(*c, c == &a ? "eager a" : "eager b");
    ASSERT_FALSE(eager.o.empty());
    EXPECT_EQ(std::memcmp(replayed.o.data(), eager.o.data(), eager.o.size() * 2), 0) << "graph o != eager o";
    EXPECT_EQ(std::memcmp(replayed.lse.data(), eager.lse.data(), eager.lse.size() * 4), 0) << "graph lse != eager";
    EXPECT_EQ(replayed.error_word, 0u);
  }
  rt.api->cuGraphExecDestroy(exec);
  rt.api->cuGraphDestroy(graph);
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

TEST_P(MlaVerifyGpu, EverySplitCountMatchesTheReference) {
  MlaCase c = reference::MakeCase(MediumSpec(81));
  for (int splits : {1, 2, 3, 7, 64}) {  // the oracle ignores the hint; the fast family must not care
    Check(c, "num_splits " + std::to_string(splits), splits);
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

TEST_P(MlaVerifyGpu, RowStridesLargerThanTheRowsAreHonored) {
  const MlaCase dense = reference::MakeCase(MediumSpec(91));
  const MlaCase strided = WithPaddedStrides(dense);
  const RunResult a = Check(dense, "dense");
  const RunResult b = Check(strided, "strided");
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

CaseSpec SmallSpec(uint64_t seed, kernels::MaskKind mask) {
  CaseSpec s;
  s.seed = seed, s.num_heads = 8, s.prefix_lens = {0, 97, 5}, s.draft_lens = {7, 1, 33};
  s.tree = TreeKind::kRandom, s.mask = mask, s.padded_requests = 1, s.padded_draft = 3;
  return s;
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

INSTANTIATE_TEST_SUITE_P(Families, MlaVerifyGpu, ::testing::Values(kFast, kFastTile32x16, kFastTile64x64, kNaive),
                         [](const ::testing::TestParamInfo<Family>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kjit::gputest
