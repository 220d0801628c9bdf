// kernel_bench [--out FILE.md] [--reps N] [--splits N[,N...]] [--tile arch|32x16|32x32|64x64] [--only LABEL[|LABEL...]]
//              [--define NAME=VALUE]... [--graph-calls N] [--timeline] [--proxy sm_120] [--compile-only]
//              [--kv bf16,fp8,fp8-numerics] [--fp8-mma on|off] [--pdl on|off] [--half-tiles on|off]
// Roofline of the mla_verify kernel: KERNEL.md's seven shapes, batch sweeps (H8 D16 at P16k, P4k and
// P1k) and a prefix sweep (H8 D16, 1k..256k). Per row: model bytes and FLOPs, floor = max(bytes / copy
// bandwidth, FLOPs / mma.sync peak) with both ceilings measured in this run, and median times over
// event-timed launches (split + combine) after warm-up, inputs rotated past the L2:
//   eager   host enqueue per launch;
//   graph   one launch replayed from a captured CUDA graph, events around each replay;
//   graph xN  N launches captured in one graph (as the layers of SGLang's decode step are), the
//           replay's time / N: the per-call cost with the graph's own launch latency spread out.
// The header also gives a launch floor: the same three timings of a call of one, and of two, one-CTA
// kernels that do no work, what no kernel change can take off a row.
// Sanity-checks small cases against the float64 reference first (not with --define or --timeline).
// --tile forces the split kernel's tile (32x16: the 99 KB mma.sync tile of sm_80/sm_89; 32x32:
// sm_120's 99 KB tile with Q in registers (its fp8 variant streams the cache's bytes and converts
// them in registers; compute capability 9 and later); 64x64: the mma.sync tile of sm_100) on any
// device; arch (the default) is the device's own, and under --proxy sm_120 sm_120's (32x32).
// --timeline compiles the kernels with per-CTA timestamps (kernel_sources/mla_verify/timeline.cuh) and
// adds a timeline table per row. --proxy sm_120 runs the sm_120 code path planned for the RTX PRO
// 6000 (proxy.cc) and projects each row onto it. --kv lists the caches each shape runs with (default
// bf16,fp8): a bf16 cache; an fp8 e4m3 cache with dequant numerics ("fp8") or with SGLang Triton's fp8
// numerics ("fp8-numerics"). An fp8 row's bytes count one byte per cache element; its FLOPs floor is
// the bf16 mma.sync peak's: dequant runs 16-bit MMAs (bf16, or f16 on the 32x32 tile). fp8 numerics
// on sm_90a run both prefix products on e4m3 warpgroup MMAs: their floor takes twice that peak. On the
// 32x32 tile fp8 numerics' Q.K^T runs e4m3 MMAs (twice the rate on sm_120; emulated on sm_90), so the
// bf16 floor is conservative for those rows. --fp8-mma off plans fp8 numerics on the emulating kernel
// (MlaVerifyPlanOptions::fp8_mma) where they would run on e4m3 MMAs (sm_90a); rows that ran e4m3
// MMAs say "(e4m3 MMAs)" after their label. --pdl off launches the split kernel plainly, after the
// kernel before it (MlaVerifyPlanOptions::programmatic_split; on sm_90+ it is otherwise a programmatic
// dependent launch, which can show where calls follow calls: graph xN, eager). --half-tiles off
// keeps sm_90a's split CTAs on whole 64-row tiles where the plan would give each half of one
// (MlaVerifyPlanOptions::half_tiles).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/kernel_bench/bench_inputs.h"
#include "bench/kernel_bench/ceilings.h"
#include "bench/kernel_bench/graph.h"
#include "bench/kernel_bench/proxy.h"
#include "bench/kernel_bench/sanity.h"
#include "bench/kernel_bench/timeline.h"
#include "kernel_sources/mla_verify/traits.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/kernels/mla_verify/launch.h"
#include "runtime/kernels/mla_verify/plan.h"

namespace kjit::bench {
namespace {

struct Options {
  std::string out;
  int reps = 60;
  std::vector<int> splits = {0};  // forced split counts, one row each; 0 = the plan's choice
  int tile = 0;                   // MlaVerifyPlanOptions::tile (mla::TileId)
  std::vector<std::string> only;  // run only shapes whose label contains one of these ('|'-separated)
  std::vector<std::string> defines;  // extra -D for the mla_verify programs (experiments; skip sanity)
  int graph_calls = 16;
  bool timeline = false;
  bool proxy = false;  // --proxy sm_120
  bool compile_only = false;
  std::vector<std::string> kv = {"bf16", "fp8"};  // --kv
  bool fp8_mma = true;  // --fp8-mma on|off
  bool pdl = true;      // --pdl on|off
  bool half_tiles = true;  // --half-tiles on|off
  // The tile every row runs: --tile, or under --proxy sm_120 without it sm_120's own (the 32x32
  // tile, for either cache), forced onto this device.
  int Tile() const { return proxy && tile == 0 ? mla::ResolvedTile(mla::kTileArch, 12) : tile; }
};

// The mla_verify specializations of one tile that the shapes use, and the mma.sync peak kernel of
// the ceilings.
std::vector<kernels::Specialization> Specs(const std::vector<std::string>& defines, int tile) {
  std::vector<kernels::Specialization> specs;
  const auto all = tile > 0 ? kernels::MlaVerifyForcedTileSpecializations(tile) : kernels::MlaVerifySpecializations();
  for (auto s : all) {
    if (s.name.rfind("h8_bool", 0) != 0 && s.name.rfind("h8_packed", 0) != 0 && s.name.rfind("h64_bool", 0) != 0)
      continue;
    for (const auto& d : defines) s.extra_options.push_back("-D" + d);
    specs.push_back(std::move(s));
  }
  specs.push_back(MmaPeakSpecialization());
  return specs;
}

StatusOr<std::vector<kernels::CompiledKernel>> Compile(const std::vector<std::string>& archs,
                                                       const std::vector<std::string>& defines, int tile,
                                                       std::string* report) {
  kernels::KernelCompiler compiler(nullptr);
  std::vector<kernels::CompiledKernel> out;
  auto results = compiler.GetAll(Specs(defines, tile), archs);
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    for (const auto& res : r->resources)
      absl::StrAppendFormat(report, "| %s | %s | %s | %d | %d | %d | %.0f |\n", r->spec.name, r->arch,
                            res.lowered_name.substr(0, 60), res.registers,
                            res.spill_store_bytes + res.spill_load_bytes, res.stack_bytes, r->compile_ms);
    out.push_back(std::move(*r));
  }
  return out;
}

std::vector<Shape> Shapes() {
  std::vector<Shape> s = {
      {"K1 H8 D16 P4k", 1, 8, 16, 4096},       {"K2 H8 D16 P64k", 1, 8, 16, 65536},
      {"K3 H8 D16 P200k", 1, 8, 16, 200000},   {"K4 H8 D64 P64k", 1, 8, 64, 65536},
      {"K5 H64 D16 P64k", 1, 64, 16, 65536},   {"K6 H8 bs8 D16 P16k", 8, 8, 16, 16384},
      {"K7 H8 D8 P64k", 1, 8, 8, 65536},
  };
  for (int p : {16384, 4096, 1024})
    for (int b = 1; b <= 8; ++b) s.push_back({absl::StrCat("bs", b, " H8 D16 P", p / 1024, "k"), b, 8, 16, p});
  for (int p = 1024; p <= 262144; p *= 2) s.push_back({absl::StrCat("P", p / 1024, "k H8 D16"), 1, 8, 16, p});
  return s;
}

struct Timed {
  double eager_us = 0, graph_us = 0, graph_n_us = 0;
};

// The three timings of one planned launch (`launch(i)` uses input rotation i % rotations).
StatusOr<Timed> TimeLaunch(const Options& opt, CUstream stream, int rotations, const std::function<Status(int)>& launch) {
  Timed t;
  KJIT_RETURN_IF_ERROR(MedianMs(stream, 5, launch).status());
  KJIT_ASSIGN_OR_RETURN(double eager_ms, MedianMs(stream, opt.reps, launch));
  std::vector<CapturedGraph> graphs;
  for (int r = 0; r < rotations; ++r) {
    KJIT_ASSIGN_OR_RETURN(CapturedGraph g, CapturedGraph::Capture(stream, [&] { return launch(r); }));
    graphs.push_back(std::move(g));
  }
  auto replay = [&](int i) { return graphs[i % graphs.size()].Launch(stream); };
  KJIT_RETURN_IF_ERROR(MedianMs(stream, 5, replay).status());
  KJIT_ASSIGN_OR_RETURN(double graph_ms, MedianMs(stream, opt.reps, replay));
  const int n = std::max(1, opt.graph_calls);
  KJIT_ASSIGN_OR_RETURN(CapturedGraph many, CapturedGraph::Capture(stream, [&]() -> Status {
                          for (int i = 0; i < n; ++i) KJIT_RETURN_IF_ERROR(launch(i));
                          return absl::OkStatus();
                        }));
  auto replay_many = [&](int) { return many.Launch(stream); };
  KJIT_RETURN_IF_ERROR(MedianMs(stream, 3, replay_many).status());
  KJIT_ASSIGN_OR_RETURN(double many_ms, MedianMs(stream, std::max(5, opt.reps / 4), replay_many));
  t.eager_us = eager_ms * 1e3;
  t.graph_us = graph_ms * 1e3;
  t.graph_n_us = many_ms * 1e3 / n;
  return t;
}

struct Bench {
  const Options& opt;
  const driver::DeviceInfo& dev;
  const kernels::KernelTable& table;
  CUstream stream;
  Ceilings ceil;
  std::optional<Proxy> proxy;
};

// One row (and with --timeline its timeline) per forced split count of one shape.
Status RunShape(const Bench& bench, const Shape& s, std::string* md, std::string* details) {
  const Options& opt = bench.opt;
  const double bytes = ModelBytes(s), flops = ModelFlops(s);
  const int rotations = static_cast<int>(std::min<double>(16, std::max<double>(1, 3 * 60e6 / (bytes + 1))));
  KJIT_ASSIGN_OR_RETURN(BenchInputs in, BenchInputs::Create(s, rotations, 1000 + s.prefix));
  for (int splits : opt.splits) {
    const kernels::MlaVerifyProblem p = in.problem();
    const driver::DeviceInfo& plan_dev = bench.proxy ? bench.proxy->plan_device : bench.dev;
    KJIT_ASSIGN_OR_RETURN(kernels::MlaVerifyPlan plan,
                          kernels::PlanMlaVerify(p, plan_dev, {.tile = opt.Tile(), .num_splits = splits, .fp8_mma = opt.fp8_mma, .programmatic_split = opt.pdl, .half_tiles = opt.half_tiles}));
    ProxyResidency residency;
    if (bench.proxy) {
      KJIT_ASSIGN_OR_RETURN(residency, bench.proxy->MatchResidency(bench.table, &plan));
    }
    KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer ws, driver::DeviceBuffer::Alloc(plan.workspace_bytes));
    auto launch = [&](int i) {
      return kernels::LaunchMlaVerify(bench.table, plan, p, in.Buffers(i % in.rotations(), ws.get()), bench.stream);
    };
    KJIT_ASSIGN_OR_RETURN(const Timed t, TimeLaunch(opt, bench.stream, in.rotations(), launch));
    uint32_t err = 0;
    KJIT_RETURN_IF_ERROR(ws.CopyToHost(&err, 4, plan.error_word_offset));
    if (err != 0 && opt.defines.empty())
      return absl::InternalError(absl::StrCat(s.label, ": kernel raised error bits ", err));
    // A plan with a tree launch of its own runs the prefix on e4m3 MMAs (sm_90a's fp8 numerics): its
    // FLOPs at twice the bf16 peak.
    const double flops_per_s = bench.ceil.mma_flops_per_s * (plan.e4m3_mma() ? 2 : 1);
    const double floor_us = std::max(bytes / bench.ceil.copy_bytes_per_s, flops / flops_per_s) * 1e6;
    std::string row = absl::StrFormat("| %s | %d | %d | %d | %d | %d | %.1f | %.2f | %.1f | %.1f | %.1f | %.1f | %.2f |",
                                      s.label + (plan.e4m3_mma() ? " (e4m3 MMAs)" : ""), s.batch, s.heads, s.draft, s.prefix, plan.num_splits, bytes / 1e6,
                                      flops / 1e9, floor_us, t.eager_us, t.graph_us, t.graph_n_us, t.graph_us / floor_us);
    if (bench.proxy) {
      KJIT_ASSIGN_OR_RETURN(const double hz, MeasureSmClockHz(bench.table, bench.dev, bench.stream));
      row += bench.proxy->Columns(residency, flops, bytes, t.graph_us * 1e-6, hz);
    }
    std::printf("%s\n", row.c_str());
    std::fflush(stdout);
    absl::StrAppend(md, row, "\n");
    if (opt.timeline) {
      KJIT_ASSIGN_OR_RETURN(const double hz, MeasureSmClockHz(bench.table, bench.dev, bench.stream));
      KJIT_ASSIGN_OR_RETURN(std::string tl, MeasureTimeline(bench.table, plan, bench.stream, 15, hz, launch));
      const std::string head = absl::StrFormat("\n### %s, %d splits (graph %.1f us, eager %.1f us)\n\n", s.label,
                                               plan.num_splits, t.graph_us, t.eager_us);
      std::printf("%s%s", head.c_str(), tl.c_str());
      absl::StrAppend(details, head, tl);
    }
  }
  return absl::OkStatus();
}

Status Run(Options opt) {
  if (opt.timeline) opt.defines.push_back("KJIT_TIMELINE=1");
  std::string compile_report =
      "| spec | arch | kernel | regs | spill bytes | stack | compile ms |\n|---|---|---|---|---|---|---|\n";
  if (opt.compile_only) {
    KJIT_RETURN_IF_ERROR(Compile({"sm_90", "sm_120"}, opt.defines, opt.Tile(), &compile_report).status());
    std::printf("%s", compile_report.c_str());
    return absl::OkStatus();
  }
  KJIT_ASSIGN_OR_RETURN(auto devices, driver::Devices());
  if (devices.empty()) return absl::FailedPreconditionError("no CUDA device");
  const driver::DeviceInfo dev = devices[0];
  KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(dev.ordinal));
  KJIT_RETURN_IF_ERROR(ctx.MakeCurrent());
  KJIT_ASSIGN_OR_RETURN(driver::Stream stream, driver::Stream::Create());
  KJIT_ASSIGN_OR_RETURN(std::vector<kernels::CompiledKernel> compiled,
                        Compile({dev.arch}, opt.defines, opt.Tile(), &compile_report));
  KJIT_ASSIGN_OR_RETURN(auto table, kernels::LoadedKernels::Load(compiled, dev));

  if (opt.defines.empty()) {
    KJIT_RETURN_IF_ERROR(CheckAgainstReference(*table, dev, stream.get(), opt.Tile()));
  } else {
    std::printf("kernels compiled with extra defines: no reference check, times only\n");
  }
  Bench bench{opt, dev, *table, stream.get(), {}, std::nullopt};
  KJIT_ASSIGN_OR_RETURN(bench.ceil, MeasureCeilings(*table, dev, stream.get()));
  if (opt.proxy) {
    KJIT_ASSIGN_OR_RETURN(bench.proxy, Proxy::Create(dev, RtxPro6000()));
  }

  const int forced_tile = opt.Tile();
  const kernels::MlaVerifyTile tile = kernels::MlaVerifyTileFor(dev.cc_major, forced_tile);
  KJIT_ASSIGN_OR_RETURN(const double hz, MeasureSmClockHz(*table, dev, stream.get()));
  std::string md = absl::StrFormat(
      "Device: %s (%s, %d SMs, SM clock %.0f MHz at the start). Ceilings measured in this run: copy %.2f TB/s "
      "(read+write), mma.sync bf16 %.0f TFLOP/s. Split tile: %d rows x %d KV rows, %d threads, %d B shared "
      "memory%s. graph xN: %d calls per graph.\n\n",
      dev.name, dev.arch, dev.sm_count, hz / 1e6, bench.ceil.copy_bytes_per_s / 1e12, bench.ceil.mma_flops_per_s / 1e12,
      tile.rows, tile.kv_tile, tile.threads, tile.smem_bytes, forced_tile > 0 ? " (forced)" : "", opt.graph_calls);
  md += "Launch floor: a call of one-CTA kernels that do no work, timed as the rows are:";
  for (int count : {1, 2}) {
    KJIT_ASSIGN_OR_RETURN(std::function<Status(int)> empty, EmptyCallLauncher(*table, stream.get(), count));
    KJIT_ASSIGN_OR_RETURN(const Timed floor, TimeLaunch(opt, stream.get(), 1, empty));
    md += absl::StrFormat("%s %s: eager %.1f us, graph %.1f us, graph xN %.1f us/call", count == 1 ? "" : ";",
                          count == 1 ? "one kernel" : "two (the split kernel's and the combine's place)",
                          floor.eager_us, floor.graph_us, floor.graph_n_us);
  }
  md += ".\n\n";
  if (bench.proxy) md += bench.proxy->Preamble();
  md += "| shape | B | H | D | P | splits | MB | GFLOP | floor us | eager us | graph us | graph xN us/call | graph/floor |";
  md += bench.proxy ? Proxy::HeaderColumns() : "";
  md += "\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";
  md += bench.proxy ? Proxy::HeaderRule() : "";
  md += "\n";
  std::printf("%s", md.c_str());
  std::string details;
  for (const Shape& base : Shapes()) {
    for (const std::string& kv : opt.kv) {
      Shape s = base;
      if (kv != "bf16") {
        if (kernels::MlaVerifyTileFor(dev.cc_major, forced_tile, kernels::KvDtype::kFp8E4m3).smem_bytes == 0)
          continue;  // a bf16-only tile (the plan would refuse the row)
        s.kv = kernels::KvDtype::kFp8E4m3;
        s.numerics = kv == "fp8" ? kernels::Fp8Numerics::kDequant : kernels::Fp8Numerics::kFp8;
        s.label += " " + kv;
      }
      if (!opt.only.empty() && std::none_of(opt.only.begin(), opt.only.end(),
                                            [&](const std::string& o) { return s.label.find(o) != std::string::npos; }))
        continue;
      KJIT_RETURN_IF_ERROR(RunShape(bench, s, &md, &details));
    }
  }
  md += details;
  md += "\nCompiled kernels (NVRTC, this run):\n\n" + compile_report;
  if (!opt.out.empty()) {
    FILE* f = std::fopen(opt.out.c_str(), "w");
    if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", opt.out));
    std::fputs(md.c_str(), f);
    std::fclose(f);
  }
  return absl::OkStatus();
}

constexpr char kUsage[] =
    "usage: kernel_bench [--out FILE.md] [--reps N] [--splits N[,N...]] [--tile arch|32x16|32x32|64x64] [--only LABEL[|LABEL...]] "
    "[--define NAME=VALUE]... [--graph-calls N] [--timeline] [--proxy sm_120] [--compile-only] "
    "[--kv bf16,fp8,fp8-numerics] [--fp8-mma on|off] [--pdl on|off] [--half-tiles on|off]\n";

bool ParseOnOff(const char* flag, const std::string& value, bool* on) {
  if (value != "on" && value != "off") {
    std::fprintf(stderr, "kernel_bench: %s takes on or off, not %s\n", flag, value.c_str());
    return false;
  }
  *on = value == "on";
  return true;
}

// Parses argv into opt; false (after a message) on a bad argument.
bool Parse(int argc, char** argv, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--out") && has_value) {
      opt->out = argv[++i];
    } else if (!std::strcmp(argv[i], "--reps") && has_value) {
      opt->reps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--graph-calls") && has_value) {
      opt->graph_calls = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--splits") && has_value) {
      opt->splits.clear();
      for (const char* c = argv[++i]; *c != '\0';) {
        opt->splits.push_back(std::max(0, std::atoi(c)));
        while (*c != '\0' && *c != ',') ++c;
        if (*c == ',') ++c;
      }
    } else if (!std::strcmp(argv[i], "--tile") && has_value) {
      const std::string t = argv[++i];
      opt->tile = t == "32x16"   ? mla::kTile32x16
                  : t == "32x32" ? mla::kTileQReg32x32
                  : t == "64x64" ? mla::kTile64x64
                  : t == "arch"  ? 0
                                 : -1;
      if (opt->tile < 0) {
        std::fprintf(stderr, "kernel_bench: --tile takes arch, 32x16, 32x32 or 64x64, not %s\n", t.c_str());
        return false;
      }
    } else if (!std::strcmp(argv[i], "--proxy") && has_value) {
      if (std::strcmp(argv[++i], "sm_120") != 0) {
        std::fprintf(stderr, "kernel_bench: --proxy takes sm_120, not %s\n", argv[i]);
        return false;
      }
      opt->proxy = true;
    } else if (!std::strcmp(argv[i], "--only") && has_value) {
      opt->only = absl::StrSplit(argv[++i], '|', absl::SkipEmpty());
    } else if (!std::strcmp(argv[i], "--define") && has_value) {
      opt->defines.push_back(argv[++i]);
    } else if (!std::strcmp(argv[i], "--kv") && has_value) {
      opt->kv = absl::StrSplit(argv[++i], ',', absl::SkipEmpty());
      for (const std::string& k : opt->kv) {
        if (k != "bf16" && k != "fp8" && k != "fp8-numerics") {
          std::fprintf(stderr, "kernel_bench: --kv takes bf16, fp8 and fp8-numerics, not %s\n", k.c_str());
          return false;
        }
      }
      if (opt->kv.empty()) {
        std::fputs("kernel_bench: --kv needs at least one of bf16, fp8, fp8-numerics\n", stderr);
        return false;
      }
    } else if (!std::strcmp(argv[i], "--fp8-mma") && has_value) {
      if (!ParseOnOff("--fp8-mma", argv[++i], &opt->fp8_mma)) return false;
    } else if (!std::strcmp(argv[i], "--pdl") && has_value) {
      if (!ParseOnOff("--pdl", argv[++i], &opt->pdl)) return false;
    } else if (!std::strcmp(argv[i], "--half-tiles") && has_value) {
      if (!ParseOnOff("--half-tiles", argv[++i], &opt->half_tiles)) return false;
    } else if (!std::strcmp(argv[i], "--timeline")) {
      opt->timeline = true;
    } else if (!std::strcmp(argv[i], "--compile-only")) {
      opt->compile_only = true;
    } else {
      std::fputs(kUsage, stderr);
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace kjit::bench

int main(int argc, char** argv) {
  kjit::bench::Options opt;
  if (!kjit::bench::Parse(argc, argv, &opt)) return 2;
  const kjit::Status st = kjit::bench::Run(opt);
  if (!st.ok()) {
    std::fprintf(stderr, "kernel_bench: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
