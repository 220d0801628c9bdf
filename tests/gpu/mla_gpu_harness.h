// GPU test harness for the MLA verify families: one device context with both families' kernels
// compiled and loaded, device copies of a reference::MlaCase, and a launch that returns the outputs
// and the error word. Fails (never skips) when there is no driver or GPU: these tests only run on
// the GPU machine.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "jit_cache/cubin_cache.h"
#include "kernel_sources/mla_verify/traits.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/registry.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/kernels/mla_verify/launch.h"
#include "runtime/kernels/mla_verify_naive/naive.h"
#include "runtime/kernels/mla_verify/plan.h"
#include "tests/gpu/device_case.h"
#include "tests/reference/mla_reference.h"

namespace kjit::gputest {

// The launch families under test, driven through the same plan/launch shape: the fast kernel with
// the device's tile (warpgroup MMA on sm_90), the fast kernel with forced mma.sync tiles (32x16 is
// sm_120's own tile: this is where it runs on an sm_90 test machine; 32x32 keeps Q in registers), and
// the oracle.
struct Family {
  const char* name;
  StatusOr<kernels::MlaVerifyPlan> (*plan)(const kernels::MlaVerifyProblem&, const driver::DeviceInfo&,
                                           const kernels::MlaVerifyPlanOptions&);
  Status (*launch)(const kernels::KernelTable&, const kernels::MlaVerifyPlan&, const kernels::MlaVerifyProblem&,
                   const kernels::MlaVerifyBuffers&, CUstream);
  int tile = 0;  // MlaVerifyPlanOptions::tile for the fast family
  // The compute capability major from which the family plans an fp8 e4m3 cache (PlansFp8); below
  // it, and for the 64x64 mma.sync tile, which has no fp8 variant, its plans must refuse one with
  // UNIMPLEMENTED. The 32x32 tile converts e4m3 with sm_89's cvt: planned from major 9.
  int fp8_from_cc_major = 0;
  // MlaVerifyPlanOptions::fp8_mma: false runs fp8 numerics on the emulating kernel even where the
  // device has e4m3 MMAs (sm_90a).
  bool fp8_mma = true;
  bool half_tiles = true;  // MlaVerifyPlanOptions::half_tiles
};
inline constexpr int kNoFp8 = 1000;
inline bool PlansFp8(const Family& f, const driver::DeviceInfo& d) { return d.cc_major >= f.fp8_from_cc_major; }
inline void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }
// The oracle's plan takes no options (it has one tile and no splits).
inline StatusOr<kernels::MlaVerifyPlan> PlanNaive(const kernels::MlaVerifyProblem& p, const driver::DeviceInfo& d,
                                                  const kernels::MlaVerifyPlanOptions&) {
  return kernels::PlanMlaVerifyNaive(p, d);
}
inline const Family kFast{"fast", &kernels::PlanMlaVerify, &kernels::LaunchMlaVerify};
inline const Family kFastTile32x16{"fast_t32x16", &kernels::PlanMlaVerify, &kernels::LaunchMlaVerify,
                                   mla::kTile32x16};
inline const Family kFastTile64x64{"fast_t64x64", &kernels::PlanMlaVerify, &kernels::LaunchMlaVerify,
                                   mla::kTile64x64, /*fp8_from_cc_major=*/kNoFp8};
inline const Family kFastTileQReg32x32{"fast_tq32x32", &kernels::PlanMlaVerify, &kernels::LaunchMlaVerify,
                                       mla::kTileQReg32x32, /*fp8_from_cc_major=*/9};
// The fast family with fp8 numerics on the emulating kernel where the device's own would run e4m3
// MMAs (sm_90a).
inline const Family kFastFp8Emulated{"fast_fp8emul", &kernels::PlanMlaVerify, &kernels::LaunchMlaVerify, 0, 0,
                                     /*fp8_mma=*/false};
inline const Family kNaive{"naive", &PlanNaive, &kernels::LaunchMlaVerifyNaive};

// The family's plan of the case, with a fixed number of prefix chunks when num_splits > 0.
inline StatusOr<kernels::MlaVerifyPlan> PlanFor(const Family& f, const reference::MlaCase& c,
                                                const driver::DeviceInfo& device, int num_splits = 0) {
  return f.plan(c.problem, device,
                {.tile = f.tile, .num_splits = num_splits, .fp8_mma = f.fp8_mma, .half_tiles = f.half_tiles});
}

// Device 0 with its context, a stream, and every specialization of both families loaded. Built once
// per process; `status` says why it is unusable.
struct GpuRuntime {
  Status status = absl::OkStatus();
  const driver::Api* api = nullptr;
  driver::DeviceInfo device;
  std::unique_ptr<driver::Context> context;
  std::unique_ptr<driver::Stream> stream;
  std::unique_ptr<cache::CubinCache> cache;
  std::unique_ptr<kernels::LoadedKernels> kernels;

  static GpuRuntime& Get() {
    static GpuRuntime* rt = [] {
      auto* r = new GpuRuntime;
      r->status = r->Init();
      return r;
    }();
    return *rt;
  }

 private:
  Status Init() {
    KJIT_ASSIGN_OR_RETURN(api, driver::Get());
    KJIT_ASSIGN_OR_RETURN(std::vector<driver::DeviceInfo> devices, driver::Devices());
    if (devices.empty()) return absl::FailedPreconditionError("no CUDA device");
    device = devices.front();
    KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(device.ordinal));
    context = std::make_unique<driver::Context>(std::move(ctx));
    KJIT_RETURN_IF_ERROR(context->MakeCurrent());
    KJIT_ASSIGN_OR_RETURN(driver::Stream s, driver::Stream::Create());
    stream = std::make_unique<driver::Stream>(std::move(s));
    cache::Options opts;
    const char* env = std::getenv("KJIT_CACHE_DIR");
    if (env == nullptr || *env == '\0') {
      char tmpl[] = "/tmp/kjit-mla-gpu-test-XXXXXX";
      if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
      opts.dir = tmpl;
    }
    cache = cache::CubinCache::Open(opts);
    kernels::KernelCompiler compiler(cache.get());
    std::vector<kernels::Specialization> specs = kernels::FamilySpecializations(kernels::kMlaVerifyFamily);
    for (auto& s : kernels::FamilySpecializations(kernels::kMlaVerifyNaiveFamily)) specs.push_back(std::move(s));
    for (int tile : {kFastTile32x16.tile, kFastTile64x64.tile, kFastTileQReg32x32.tile}) {
      for (auto& s : kernels::MlaVerifyForcedTileSpecializations(tile)) specs.push_back(std::move(s));
    }
    std::vector<kernels::CompiledKernel> compiled;
    for (auto& k : compiler.GetAll(specs, {device.arch})) {
      if (!k.ok()) return WithContext(k.status(), "compiling the MLA verify catalog");
      compiled.push_back(std::move(*k));
    }
    KJIT_ASSIGN_OR_RETURN(kernels, kernels::LoadedKernels::Load(compiled, device));
    return absl::OkStatus();
  }
};

struct RunResult {
  std::vector<uint16_t> o;
  std::vector<float> lse;  // empty when the problem does not write lse
  uint32_t error_word = 0xffffffffu;
  bool e4m3_mma = false;  // the plan ran fp8 numerics on e4m3 MMAs (MlaVerifyPlan::e4m3_mma)
  // The tolerance against the reference that fits the kernel that ran.
  reference::Tolerance Tolerance() const { return e4m3_mma ? reference::E4m3MmaTolerance() : reference::Tolerance{}; }
};

// Plans, uploads, poisons, launches eagerly on the runtime's stream, synchronizes and reads back.
// num_splits > 0 fixes the fast family's prefix chunks (the oracle has none).
inline StatusOr<RunResult> RunOnce(const Family& family, const reference::MlaCase& c, int num_splits = 0) {
  GpuRuntime& rt = GpuRuntime::Get();
  KJIT_RETURN_IF_ERROR(rt.status);
  KJIT_ASSIGN_OR_RETURN(kernels::MlaVerifyPlan plan, PlanFor(family, c, rt.device, num_splits));
  KJIT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCase> d, DeviceCase::Create(c, plan.workspace_bytes));
  KJIT_RETURN_IF_ERROR(family.launch(*rt.kernels, plan, c.problem, d->Buffers(c.problem.write_lse), rt.stream->get()));
  KJIT_RETURN_IF_ERROR(rt.stream->Synchronize());
  RunResult r;
  r.e4m3_mma = plan.e4m3_mma();
  KJIT_RETURN_IF_ERROR(d->Download(&r.o, &r.lse, &r.error_word, plan.error_word_offset));
  if (!c.problem.write_lse) r.lse.clear();
  return r;
}

// Runs the family on c and checks it against the float64 reference (for fp8 numerics, their
// emulation); returns the run (empty when it failed) and, with cmp_out, the comparison.
inline RunResult CheckAgainstReference(const Family& family, const reference::MlaCase& c, const std::string& label,
                                       int num_splits = 0, reference::Comparison* cmp_out = nullptr) {
  StatusOr<RunResult> run = RunOnce(family, c, num_splits);
  EXPECT_TRUE(run.ok()) << label << ": " << run.status();
  if (!run.ok()) return {};
  const reference::RefOutput want = reference::Reference(c);
  const reference::Comparison cmp = reference::Compare(c, want, run->o, run->lse, run->Tolerance());
  EXPECT_TRUE(cmp.ok()) << family.name << " " << label << "\n" << cmp.Describe();
  if (cmp_out != nullptr) *cmp_out = cmp;
  return *run;
}

// Equal sizes and equal bytes (a float compare would call -0 and 0 equal and NaN unequal to itself).
template <class T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Ten eager runs of c give bitwise-identical o and lse, each matching the reference.
inline void ExpectBitwiseIdenticalRuns(const Family& family, const reference::MlaCase& c) {
  const RunResult first = CheckAgainstReference(family, c, "first run");
  ASSERT_FALSE(first.o.empty());
  for (int i = 1; i < 10; ++i) {
    StatusOr<RunResult> again = RunOnce(family, c);
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_TRUE(SameBits(again->o, first.o)) << "o differs in run " << i;
    ASSERT_TRUE(SameBits(again->lse, first.lse)) << "lse differs in run " << i;
  }
}

// One CUDA graph captured on a's buffers and replayed on a's inputs, then on b's (same problem, other
// values, slots and tree): each replay equals an eager run bitwise, and eager runs match the reference.
inline void ExpectGraphReplayEqualsEager(const Family& family, const reference::MlaCase& a, const reference::MlaCase& b) {
  GpuRuntime& rt = GpuRuntime::Get();
  ASSERT_EQ(a.q.size(), b.q.size());
  const kernels::MlaVerifyProblem& problem = a.problem;
  StatusOr<kernels::MlaVerifyPlan> plan = PlanFor(family, a, rt.device);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto d = DeviceCase::Create(a, plan->workspace_bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  const kernels::MlaVerifyBuffers bufs = (*d)->Buffers(true);
  CUstream stream = rt.stream->get();

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_TRUE(driver::Check(rt.api->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "capture").ok());
  const Status launched = family.launch(*rt.kernels, *plan, problem, bufs, stream);
  const Status ended = driver::Check(rt.api->cuStreamEndCapture(stream, &graph), "end capture");
  ASSERT_TRUE(launched.ok()) << launched;
  ASSERT_TRUE(ended.ok()) << ended;
  ASSERT_TRUE(driver::Check(rt.api->cuGraphInstantiate(&exec, graph, 0), "instantiate").ok());

  RunResult replayed;
  for (const reference::MlaCase* c : {&a, &b}) {  // replay on the captured inputs, then on new ones
    ASSERT_TRUE((*d)->Upload(*c).ok());
    ASSERT_TRUE(driver::Check(rt.api->cuGraphLaunch(exec, stream), "graph launch").ok());
    ASSERT_TRUE(rt.stream->Synchronize().ok());
    ASSERT_TRUE((*d)->Download(&replayed.o, &replayed.lse, &replayed.error_word, plan->error_word_offset).ok());
    if (!c->problem.write_lse) replayed.lse.clear();  // the eager run writes none to compare with
    const RunResult eager = CheckAgainstReference(family, *c, c == &a ? "eager a" : "eager b");
    ASSERT_FALSE(eager.o.empty());
    EXPECT_TRUE(SameBits(replayed.o, eager.o)) << "graph o != eager o";
    EXPECT_TRUE(SameBits(replayed.lse, eager.lse)) << "graph lse != eager";
    EXPECT_EQ(replayed.error_word, 0u);
  }
  rt.api->cuGraphExecDestroy(exec);
  rt.api->cuGraphDestroy(graph);
}

// Calls on two problems that share one workspace, enqueued back to back (a, b, a, b, ...) with no
// synchronization between them: each launch's kernels must wait for the one before it in the stream
// before touching the workspace (on sm_90+ the split kernel is a programmatic dependent launch that
// may start while the previous call's combine still reads its states). Each output equals an eager,
// isolated run bitwise, and each eager run matches the reference.
inline void ExpectBackToBackCallsShareAWorkspace(const Family& family, const reference::MlaCase& a,
                                                 const reference::MlaCase& b, int rounds = 8) {
  GpuRuntime& rt = GpuRuntime::Get();
  StatusOr<kernels::MlaVerifyPlan> plan_a = PlanFor(family, a, rt.device);
  StatusOr<kernels::MlaVerifyPlan> plan_b = PlanFor(family, b, rt.device);
  ASSERT_TRUE(plan_a.ok()) << plan_a.status();
  ASSERT_TRUE(plan_b.ok()) << plan_b.status();
  const size_t ws = std::max(plan_a->workspace_bytes, plan_b->workspace_bytes);
  auto da = DeviceCase::Create(a, ws);
  auto db = DeviceCase::Create(b, ws);
  ASSERT_TRUE(da.ok()) << da.status();
  ASSERT_TRUE(db.ok()) << db.status();
  const kernels::MlaVerifyBuffers bufs_a = (*da)->Buffers(a.problem.write_lse);
  kernels::MlaVerifyBuffers bufs_b = (*db)->Buffers(b.problem.write_lse);
  bufs_b.workspace = bufs_a.workspace;
  for (int i = 0; i < rounds; ++i) {
    ASSERT_TRUE(family.launch(*rt.kernels, *plan_a, a.problem, bufs_a, rt.stream->get()).ok());
    ASSERT_TRUE(family.launch(*rt.kernels, *plan_b, b.problem, bufs_b, rt.stream->get()).ok());
  }
  ASSERT_TRUE(rt.stream->Synchronize().ok());
  for (const reference::MlaCase* c : {&a, &b}) {
    const bool is_a = c == &a;
    RunResult shared;  // o and lse (the error word of the shared workspace is the last launch's)
    ASSERT_TRUE((is_a ? *da : *db)->Download(&shared.o, &shared.lse, &shared.error_word, 0).ok());
    if (!c->problem.write_lse) shared.lse.clear();
    const RunResult eager = CheckAgainstReference(family, *c, is_a ? "eager a" : "eager b");
    ASSERT_FALSE(eager.o.empty());
    EXPECT_TRUE(SameBits(shared.o, eager.o))
        << (is_a ? "a" : "b") << ": o after back-to-back calls != an isolated run's";
    EXPECT_TRUE(SameBits(shared.lse, eager.lse))
        << (is_a ? "a" : "b") << ": lse after back-to-back calls != an isolated run's";
  }
}

}  // namespace kjit::gputest
