// `kjit compile --arch sm_120,sm_90 [--kernel NAME]`: fill a cache with the catalog's cubins (e.g.
// on a build machine, to ship the cache with a release).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "cli/output.h"
#include "jit_cache/cubin_cache.h"
#include "runtime/common/kernel_resources.h"
#include "runtime/kernels/registry.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::cli {
namespace {

const Command kCompile{
    "kjit compile --arch ARCH[,ARCH...] [flags]",
    "Compile every specialization of the kernel catalog (or of one family) for each arch into the\n"
    "cache; entries already there are verified and reused. One progress line per specialization\n"
    "(stderr), then a table of kernels with their resource report.",
    {{"arch", "LIST", "comma-separated archs, e.g. sm_120,sm_90 (exact: sm_120a is its own arch)"},
     {"kernel", "NAME", "only this family (mla_verify) or specialization (mla_verify/NAME)"},
     {"cache-dir", "DIR", "cache directory (default $KJIT_CACHE_DIR, $XDG_CACHE_HOME/kjit, ~/.cache/kjit)"},
     {"jobs", "N", "parallel compiles (default: bounded by cores and memory)"},
     {"json", "", "print JSON instead of the table"}}};

StatusOr<std::vector<kernels::Specialization>> Select(const std::string& name) {
  const auto& all = kernels::Catalog();
  if (name.empty()) return all;
  std::vector<kernels::Specialization> out;
  std::vector<std::string> known;
  for (const auto& s : all) {
    const std::string full = s.family + "/" + s.name;
    if (s.family == name || full == name) out.push_back(s);
    if (known.empty() || known.back() != s.family) known.push_back(s.family);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no kernel '", name, "' in the catalog; families: ",
                                                   absl::StrJoin(known, " "), " (or FAMILY/SPECIALIZATION)"));
  }
  return out;
}

Json ResultJson(const kernels::Specialization& spec, const std::string& arch,
                const StatusOr<kernels::CompiledKernel>& r) {
  Json j = {{"family", spec.family}, {"specialization", spec.name}, {"arch", arch}};
  if (!r.ok()) {
    j["error"] = std::string(r.status().message());
    return j;
  }
  j["cubin_arch"] = r->cubin_arch;
  Json ks = Json::array();
  for (size_t i = 0; i < r->lowered_names.size(); ++i) {
    const KernelResources* res = i < r->resources.size() ? &r->resources[i] : nullptr;
    ks.push_back({{"name_expression", r->lowered_names[i].first},
                  {"lowered_name", r->lowered_names[i].second},
                  {"registers", res ? res->registers : 0},
                  {"spill_store_bytes", res ? res->spill_store_bytes : 0},
                  {"spill_load_bytes", res ? res->spill_load_bytes : 0},
                  {"shared_bytes", res ? res->shared_bytes : 0}});
  }
  j["origin"] = cache::OriginName(r->origin);
  j["compile_ms"] = r->compile_ms;
  j["cache_key"] = r->cache_key;
  j["cubin_bytes"] = r->cubin.size();
  j["kernels"] = std::move(ks);
  return j;
}

}  // namespace

int RunCompile(int argc, char** argv, int first) {
  StatusOr<Parsed> p = Parse(kCompile, argc, argv, first);
  if (!p.ok()) return UsageError(kCompile, p.status());
  if (p->help) {
    std::fputs(HelpText(kCompile).c_str(), stdout);
    return kExitOk;
  }
  if (!p->Has("arch")) return UsageError(kCompile, absl::InvalidArgumentError("--arch is required"));
  std::vector<std::string> archs = absl::StrSplit(p->Get("arch"), ',', absl::SkipEmpty());
  if (archs.empty()) return UsageError(kCompile, absl::InvalidArgumentError("--arch is empty"));
  for (const auto& a : archs) {
    if (Status s = nvrtc::ValidateArch(a); !s.ok()) return UsageError(kCompile, s);
  }
  int jobs = 0;
  if (p->Has("jobs") && (!absl::SimpleAtoi(p->Get("jobs"), &jobs) || jobs <= 0)) {
    return UsageError(kCompile, absl::InvalidArgumentError("--jobs must be a positive integer"));
  }
  StatusOr<std::vector<kernels::Specialization>> specs = Select(p->Get("kernel"));
  if (!specs.ok()) return UsageError(kCompile, specs.status());

  auto cache = cache::CubinCache::Open(cache::Options{.dir = p->Get("cache-dir")});
  if (!cache->warning().empty()) std::fprintf(stderr, "kjit: warning: %s\n", cache->warning().c_str());
  kernels::KernelCompiler compiler(cache.get(), jobs);
  const auto start = std::chrono::steady_clock::now();
  auto results = compiler.GetAll(*specs, archs, [](int done, int total, const kernels::CompiledKernel* k,
                                                   const Status& s) {
    if (k) {
      std::fprintf(stderr, "[%d/%d] %s/%s %s: %s (%.0f ms compile)\n", done, total, k->spec.family.c_str(),
                   k->spec.name.c_str(), k->arch.c_str(), cache::OriginName(k->origin), k->compile_ms);
    } else {
      std::fprintf(stderr, "[%d/%d] FAILED: %s\n", done, total, std::string(s.message()).c_str());
    }
  });
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  int failed = 0, compiled = 0;
  Json items = Json::array();
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& spec = (*specs)[i / archs.size()];
    const std::string& arch = archs[i % archs.size()];
    items.push_back(ResultJson(spec, arch, results[i]));
    if (!results[i].ok()) {
      ++failed;
      continue;
    }
    const auto& k = *results[i];
    compiled += k.origin == kernels::CompiledKernel::Origin::kCompiled;
    for (size_t j = 0; j < k.lowered_names.size(); ++j) {
      const KernelResources r = j < k.resources.size() ? k.resources[j] : KernelResources{};
      const std::string shown = k.cubin_arch == arch ? arch : arch + " as " + k.cubin_arch;
      rows.push_back({k.lowered_names[j].first, spec.family + "/" + spec.name, shown, std::to_string(r.registers),
                      absl::StrCat(r.spill_store_bytes, "/", r.spill_load_bytes), std::to_string(r.shared_bytes),
                      absl::StrFormat("%.0f", k.compile_ms), cache::OriginName(k.origin)});
    }
  }
  const cache::Stats st = cache->stats();
  if (p->Has("json")) {
    PrintJson({{"cache_dir", cache->dir()},
               {"memory_only", cache->memory_only()},
               {"wall_ms", wall_ms},
               {"results", std::move(items)}});
  } else {
    PrintTable({"kernel", "spec", "arch", "registers", "spills st/ld", "smem", "compile ms", "origin"}, rows);
    std::printf("%zu specializations x %zu archs: %d compiled, %lu from disk, %d failed; %.1f s; cache %s\n",
                specs->size(), archs.size(), compiled, static_cast<unsigned long>(st.hits_disk), failed,
                wall_ms / 1000, cache->memory_only() ? "memory-only (nothing stored)" : cache->dir().c_str());
  }
  if (cache->memory_only()) std::fprintf(stderr, "kjit: the cache directory is unusable; nothing was stored\n");
  return failed || cache->memory_only() ? kExitFailure : kExitOk;
}

}  // namespace kjit::cli
