// kernel_bench [--out FILE.md] [--reps N] [--splits N[,N...]] [--tile arch|32x16|64x64] [--only LABEL] [--define NAME=VALUE]
//              [--compile-only]
// Roofline of the mla_verify kernel on the H200: KERNEL.md's seven shapes, a batch sweep (H8 D16
// P16k each) and a prefix sweep (H8 D16, 1k..256k). Per row: model bytes and FLOPs, floor =
// max(bytes / copy bandwidth, FLOPs / mma.sync peak) with both ceilings measured in this run,
// median time over >= 50 event-timed launches (split + combine + error-word reset) after warm-up,
// eager (host enqueue per step) and replayed from a captured CUDA graph (what SGLang's graph runner sees),
// inputs rotated past the L2. Sanity-checks small cases against the float64 reference first.
// --tile forces the split kernel's tile (32x16: the 99 KB mma.sync tile of sm_80/sm_120; 64x64: the
// mma.sync tile of sm_100) on any device, so they can be timed on the H200; arch (the default) is
// the device's own.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/kernel_bench/bench_inputs.h"
#include "bench/kernel_bench/ceilings.h"
#include "bench/kernel_bench/graph.h"
#include "bench/kernel_bench/sanity.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/kernels/mla_verify/launch.h"
#include "kernel_sources/mla_verify/traits.h"
#include "runtime/kernels/mla_verify/plan.h"

namespace kjit::bench {
namespace {

struct Options {
  std::string out;
  int reps = 60;
  std::vector<int> splits = {0};  // forced split counts, one row each; 0 = the plan's choice
  int tile = 0;  // MlaVerifyPlanOptions::tile (mla::TileId)
  std::string only;  // run only shapes whose label contains this
  std::string define;  // extra -D for the mla_verify programs (kernel experiments; skips sanity)
  bool compile_only = false;
};

std::vector<kernels::Specialization> Specs(const std::string& define, int tile) {
  std::vector<kernels::Specialization> specs;
  const auto all = tile > 0 ? kernels::MlaVerifyForcedTileSpecializations(tile) : kernels::MlaVerifySpecializations();
  for (auto s : all) {
    if (s.name.rfind("h8_bool", 0) != 0 && s.name.rfind("h8_packed", 0) != 0 && s.name.rfind("h64_bool", 0) != 0)
      continue;
    if (!define.empty()) s.extra_options.push_back("-D" + define);
    specs.push_back(std::move(s));
  }
  specs.push_back(MmaPeakSpecialization());
  return specs;
}

StatusOr<std::vector<kernels::CompiledKernel>> Compile(const std::vector<std::string>& archs, const std::string& define,
                                                       int tile, std::string* report) {
  kernels::KernelCompiler compiler(nullptr);
  std::vector<kernels::CompiledKernel> out;
  auto results = compiler.GetAll(Specs(define, tile), archs);
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
  for (int b = 1; b <= 8; ++b) s.push_back({absl::StrCat("bs", b, " H8 D16 P16k"), b, 8, 16, 16384});
  for (int p = 1024; p <= 262144; p *= 2) s.push_back({absl::StrCat("P", p / 1024, "k H8 D16"), 1, 8, 16, p});
  return s;
}

Status Run(const Options& opt) {
  std::string compile_report =
      "| spec | arch | kernel | regs | spill bytes | stack | compile ms |\n|---|---|---|---|---|---|---|\n";
  if (opt.compile_only) {
    KJIT_RETURN_IF_ERROR(Compile({"sm_90", "sm_120"}, opt.define, opt.tile, &compile_report).status());
    std::printf("%s", compile_report.c_str());
    return absl::OkStatus();
  }
  KJIT_ASSIGN_OR_RETURN(auto devices, driver::Devices());
  if (devices.empty()) return absl::FailedPreconditionError("no CUDA device");
  const driver::DeviceInfo dev = devices[0];
  KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(dev.ordinal));
  KJIT_RETURN_IF_ERROR(ctx.MakeCurrent());
  KJIT_ASSIGN_OR_RETURN(driver::Stream stream, driver::Stream::Create());
  KJIT_ASSIGN_OR_RETURN(auto compiled, Compile({dev.arch}, opt.define, opt.tile, &compile_report));
  KJIT_ASSIGN_OR_RETURN(auto table, kernels::LoadedKernels::Load(compiled, dev));

  if (opt.define.empty()) {
    KJIT_RETURN_IF_ERROR(CheckAgainstReference(*table, dev, stream.get(), opt.tile));
  } else {
    std::printf("kernel experiment -D%s: no reference check, times only\n", opt.define.c_str());
  }
  KJIT_ASSIGN_OR_RETURN(const Ceilings ceil, MeasureCeilings(*table, dev, stream.get()));

  const kernels::MlaVerifyTile tile = kernels::MlaVerifyTileFor(dev.cc_major, opt.tile);
  std::string md = absl::StrFormat(
      "Device: %s (%s, %d SMs). Ceilings measured in this run: copy %.2f TB/s (read+write), "
      "mma.sync bf16 %.0f TFLOP/s. Split tile: %d rows x %d KV rows, %d threads, %d B shared memory%s.\n\n",
      dev.name, dev.arch, dev.sm_count, ceil.copy_bytes_per_s / 1e12, ceil.mma_flops_per_s / 1e12, tile.rows,
      tile.kv_tile, tile.threads, tile.smem_bytes, opt.tile > 0 ? " (forced)" : "");
  md += "| shape | B | H | D | P | splits | MB | GFLOP | floor us | eager us | graph us | graph/floor |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::printf("%s", md.c_str());
  for (const Shape& s : Shapes()) {
    if (!opt.only.empty() && s.label.find(opt.only) == std::string::npos) continue;
    const double bytes = ModelBytes(s), flops = ModelFlops(s);
    const int rotations = static_cast<int>(std::min<double>(16, std::max<double>(1, 3 * 60e6 / (bytes + 1))));
    KJIT_ASSIGN_OR_RETURN(BenchInputs in, BenchInputs::Create(s, rotations, 1000 + s.prefix));
    for (int splits : opt.splits) {
      const kernels::MlaVerifyProblem p = in.problem();
      KJIT_ASSIGN_OR_RETURN(kernels::MlaVerifyPlan plan,
                            kernels::PlanMlaVerify(p, dev, {.tile = opt.tile, .num_splits = splits}));
      KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer ws, driver::DeviceBuffer::Alloc(plan.workspace_bytes));
      auto launch = [&](int i) {
        return kernels::LaunchMlaVerify(*table, plan, p, in.Buffers(i, ws.get()), stream.get());
      };
      KJIT_RETURN_IF_ERROR(MedianMs(stream.get(), 5, launch).status());
      KJIT_ASSIGN_OR_RETURN(double eager_ms, MedianMs(stream.get(), opt.reps, launch));
      std::vector<CapturedGraph> graphs;
      for (int r = 0; r < in.rotations(); ++r) {
        KJIT_ASSIGN_OR_RETURN(CapturedGraph g, CapturedGraph::Capture(stream.get(), [&] { return launch(r); }));
        graphs.push_back(std::move(g));
      }
      auto replay = [&](int i) { return graphs[i % graphs.size()].Launch(stream.get()); };
      KJIT_RETURN_IF_ERROR(MedianMs(stream.get(), 5, replay).status());
      KJIT_ASSIGN_OR_RETURN(double ms, MedianMs(stream.get(), opt.reps, replay));
      uint32_t err = 0;
      KJIT_RETURN_IF_ERROR(ws.CopyToHost(&err, 4, plan.error_word_offset));
      if (err != 0 && opt.define.empty())
        return absl::InternalError(absl::StrCat(s.label, ": kernel raised error bits ", err));
      const double floor_us = std::max(bytes / ceil.copy_bytes_per_s, flops / ceil.mma_flops_per_s) * 1e6;
      const std::string row = absl::StrFormat(
          "| %s | %d | %d | %d | %d | %d | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f |\n", s.label, s.batch, s.heads,
          s.draft, s.prefix, plan.num_splits, bytes / 1e6, flops / 1e9, floor_us, eager_ms * 1e3, ms * 1e3,
          ms * 1e3 / floor_us);
      std::printf("%s", row.c_str());
      std::fflush(stdout);
      md += row;
    }
  }
  md += "\nCompiled kernels (NVRTC, this run):\n\n" + compile_report;
  if (!opt.out.empty()) {
    FILE* f = std::fopen(opt.out.c_str(), "w");
    if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", opt.out));
    std::fputs(md.c_str(), f);
    std::fclose(f);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kjit::bench

int main(int argc, char** argv) {
  kjit::bench::Options opt;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) {
      opt.out = argv[++i];
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      opt.reps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--splits") && i + 1 < argc) {
      opt.splits.clear();
      for (const char* c = argv[++i]; *c != '\0';) {
        opt.splits.push_back(std::max(0, std::atoi(c)));
        while (*c != '\0' && *c != ',') ++c;
        if (*c == ',') ++c;
      }
    } else if (!std::strcmp(argv[i], "--tile") && i + 1 < argc) {
      const std::string t = argv[++i];
      opt.tile = t == "32x16" ? kjit::mla::kTile32x16 : t == "64x64" ? kjit::mla::kTile64x64 : t == "arch" ? 0 : -1;
      if (opt.tile < 0) {
        std::fprintf(stderr, "kernel_bench: --tile takes arch, 32x16 or 64x64, not %s\n", t.c_str());
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      opt.only = argv[++i];
    } else if (!std::strcmp(argv[i], "--define") && i + 1 < argc) {
      opt.define = argv[++i];
    } else if (!std::strcmp(argv[i], "--compile-only")) {
      opt.compile_only = true;
    } else {
      std::fprintf(stderr,
                   "usage: kernel_bench [--out FILE.md] [--reps N] [--splits N[,N...]] [--tile arch|32x16|64x64] [--only LABEL] "
                   "[--define NAME=VALUE] [--compile-only]\n");
      return 2;
    }
  }
  const kjit::Status st = kjit::bench::Run(opt);
  if (!st.ok()) {
    std::fprintf(stderr, "kernel_bench: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
