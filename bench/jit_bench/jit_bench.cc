// jit_bench: what NVRTC and the cubin cache cost at startup.
//  1. cold, per specialization: one NVRTC compile at a time into an empty cache (wall ms);
//  2. cold, whole catalog: every specialization with --jobs parallel compiles into an empty cache;
//  3. warm start: a new CubinCache + KernelCompiler serving the whole catalog from disk, every entry
//     read and checksum-verified (median of --repeats; the OS page cache is warm), plus, when a GPU
//     exists, LoadedKernels::Load resolving every kernel;
//  4. memory hits: the same catalog again from the same cache.
// Targets (JIT_CACHE.md / ARCHITECTURE.md): cold catalog <= 20 s on 2 cores, warm start <= 100 ms.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/args.h"
#include "jit_cache/cubin_cache.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/registry.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::bench {
namespace {

using kernels::CompiledKernel;
using Clock = std::chrono::steady_clock;

const cli::Command kBench{
    "jit_bench [flags]",
    "Cold NVRTC compile time per specialization and for the whole catalog, and warm-start time\n"
    "from the disk cache (loaded on the GPU when one exists).",
    {{"arch", "ARCH", "arch to compile for (default: the first GPU's, else sm_90)"},
     {"jobs", "N", "parallel compiles for the whole-catalog run (default: cores and memory bound)"},
     {"repeats", "N", "warm-start repetitions, median reported (default 15)"},
     {"out", "FILE", "also write the markdown report to FILE"}}};

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "kjit-jit-bench-XXXXXX").string();
    path = mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

StatusOr<std::vector<CompiledKernel>> AllOk(std::vector<StatusOr<CompiledKernel>> results) {
  std::vector<CompiledKernel> out;
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    out.push_back(*std::move(r));
  }
  return out;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

Status Run(const cli::Parsed& p, const std::string& command) {
  const auto& catalog = kernels::Catalog();
  if (catalog.empty()) return absl::FailedPreconditionError("the kernel catalog is empty");
  // A GPU, when there is one, decides the arch and gets the cubins loaded.
  std::optional<driver::DeviceInfo> device;
  std::optional<driver::Context> ctx;
  if (auto devs = driver::Devices(); devs.ok() && !devs->empty()) {
    device = devs->front();
    KJIT_ASSIGN_OR_RETURN(driver::Context c, driver::Context::RetainPrimary(device->ordinal));
    KJIT_RETURN_IF_ERROR(c.MakeCurrent());
    ctx = std::move(c);
  }
  const std::string arch = p.Get("arch", device ? device->arch : "sm_90");
  KJIT_RETURN_IF_ERROR(nvrtc::ValidateArch(arch));
  int jobs = 0, repeats = 15;
  if (p.Has("jobs") && (!absl::SimpleAtoi(p.Get("jobs"), &jobs) || jobs <= 0)) {
    return absl::InvalidArgumentError("--jobs must be a positive integer");
  }
  if (p.Has("repeats") && (!absl::SimpleAtoi(p.Get("repeats"), &repeats) || repeats <= 0)) {
    return absl::InvalidArgumentError("--repeats must be a positive integer");
  }

  // 1. Cold, one compile at a time.
  std::string rows;
  double serial_total_ms = 0;
  {
    TempDir dir;
    auto cache = cache::CubinCache::Open(cache::Options{.dir = dir.path});
    kernels::KernelCompiler one(cache.get(), 1);
    for (const auto& spec : catalog) {
      const auto t = Clock::now();
      KJIT_ASSIGN_OR_RETURN(CompiledKernel k, one.Get(spec, arch));
      const double ms = MsSince(t);
      serial_total_ms += ms;
      int max_regs = 0, spills = 0;
      for (const auto& r : k.resources) {
        max_regs = std::max(max_regs, r.registers);
        spills += r.spill_store_bytes + r.spill_load_bytes;
      }
      rows += absl::StrFormat("| %s/%s | %s | %.0f | %.0f | %.1f | %d | %d | %d |\n", spec.family, spec.name, arch, ms,
                              k.compile_ms, k.cubin.size() / 1024.0, k.lowered_names.size(), max_regs, spills);
      std::fprintf(stderr, "cold %s/%s %s: %.0f ms\n", spec.family.c_str(), spec.name.c_str(), arch.c_str(), ms);
    }
  }

  // 2. Cold, whole catalog in parallel; this cache directory then serves the warm runs.
  TempDir dir;
  double catalog_ms = 0;
  int used_jobs = 0;
  {
    auto cache = cache::CubinCache::Open(cache::Options{.dir = dir.path});
    kernels::KernelCompiler compiler(cache.get(), jobs);
    used_jobs = compiler.max_parallel();
    const auto t = Clock::now();
    KJIT_RETURN_IF_ERROR(AllOk(compiler.GetAll(catalog, {arch})).status());
    catalog_ms = MsSince(t);
    if (cache->stats().compiles != catalog.size()) return absl::InternalError("cold run did not compile every entry");
    std::fprintf(stderr, "cold catalog (%d jobs): %.0f ms\n", used_jobs, catalog_ms);
  }

  // 3. Warm start, as a new process would do it; 4. memory hits.
  std::vector<double> warm_ms, load_ms, memory_ms;
  for (int r = 0; r < repeats; ++r) {
    const auto t = Clock::now();
    auto cache = cache::CubinCache::Open(cache::Options{.dir = dir.path});
    kernels::KernelCompiler compiler(cache.get(), jobs);
    KJIT_ASSIGN_OR_RETURN(std::vector<CompiledKernel> ks, AllOk(compiler.GetAll(catalog, {arch})));
    warm_ms.push_back(MsSince(t));
    if (cache->stats().hits_disk != catalog.size()) return absl::InternalError("warm run missed the disk cache");
    if (device) {
      const auto tl = Clock::now();
      KJIT_ASSIGN_OR_RETURN(auto loaded, kernels::LoadedKernels::Load(ks, *device));
      load_ms.push_back(MsSince(tl));
    }
    const auto tm = Clock::now();
    KJIT_RETURN_IF_ERROR(AllOk(compiler.GetAll(catalog, {arch})).status());
    memory_ms.push_back(MsSince(tm));
  }

  std::string md = absl::StrFormat(
      "# jit_bench %s\n\nHost: %s, %d cores; NVRTC %s; GPU: %s.\nCommand: `%s`\n\n",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()), CpuModel(),
      static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), nvrtc::Version(),
      device ? absl::StrCat(device->name, " (", device->arch, ")") : "none", command);
  md += "| specialization | arch | cold compile ms (1 job, wall) | NVRTC ms | cubin KiB | kernels | max registers | spill bytes |\n"
        "|---|---|---|---|---|---|---|---|\n" + rows + "\n";
  md += "| measurement | value | target |\n|---|---|---|\n";
  md += absl::StrFormat("| cold, %d specializations one at a time (sum) | %.2f s | |\n", catalog.size(), serial_total_ms / 1000);
  md += absl::StrFormat("| cold, whole catalog, %d parallel compiles | %.2f s | <= 20 s on 2 cores |\n", used_jobs, catalog_ms / 1000);
  md += absl::StrFormat("| warm start: open cache + read and verify %d entries from disk (median of %d; min %.1f, max %.1f) | %.1f ms | <= 100 ms |\n",
                        catalog.size(), repeats, *std::min_element(warm_ms.begin(), warm_ms.end()),
                        *std::max_element(warm_ms.begin(), warm_ms.end()), Median(warm_ms));
  if (device) {
    md += absl::StrFormat("| + LoadedKernels::Load, every kernel resolved (median) | %.1f ms | |\n", Median(load_ms));
    md += absl::StrFormat("| warm start total (median) | %.1f ms | <= 100 ms |\n", Median(warm_ms) + Median(load_ms));
  } else {
    md += "| LoadedKernels::Load | not measured: no GPU | |\n";
  }
  md += absl::StrFormat("| whole catalog from the memory tier (median) | %.2f ms | |\n", Median(memory_ms));
  std::fputs(md.c_str(), stdout);
  if (p.Has("out")) {
    std::ofstream out(p.Get("out"));
    out << md;
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", p.Get("out")));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kjit::bench

int main(int argc, char** argv) {
  using namespace kjit;
  StatusOr<cli::Parsed> p = cli::Parse(bench::kBench, argc, argv, 1);
  if (!p.ok()) return cli::UsageError(bench::kBench, p.status());
  if (p->help) {
    std::fputs(cli::HelpText(bench::kBench).c_str(), stdout);
    return cli::kExitOk;
  }
  std::vector<std::string> args(argv, argv + argc);
  args[0] = std::filesystem::path(args[0]).filename().string();
  if (Status s = bench::Run(*p, absl::StrJoin(args, " ")); !s.ok()) {
    std::fprintf(stderr, "jit_bench: %s\n", std::string(s.message()).c_str());
    return cli::kExitFailure;
  }
  return cli::kExitOk;
}
