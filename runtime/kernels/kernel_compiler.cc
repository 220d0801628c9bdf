#include "runtime/kernels/kernel_compiler.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "jit_cache/cubin_cache.h"
#include "runtime/kernels/kernel_sources.h"

namespace kjit::kernels {
namespace {

constexpr uint64_t kBytesPerCompile = 500ull << 20;  // a large NVRTC compile peaks near this

Status Stopped() {
  return absl::CancelledError(
      "not compiled: the caller stopped waiting (its client cancelled or left, or kjitd is stopping)");
}

// The toolkit headers a compile can reach are identified by the NVRTC build and the CUDA_VERSION of
// the include directory in use (an override may point at another toolkit's headers).
std::string ToolkitId() {
  static const std::string id = [] {
    std::string cuda_version = "unknown";
    std::ifstream in(nvrtc::CudaIncludeDir() + "/cuda.h");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("#define CUDA_VERSION ", 0) == 0) {
        cuda_version = line.substr(21);
        break;
      }
    }
    std::string id = absl::StrCat("nvrtc ", nvrtc::Version(), "; headers CUDA_VERSION ", cuda_version);
    // NVRTC appends these to every compile's options behind our back: they must reach the key.
    if (const char* extra = std::getenv("NVRTC_APPEND_FLAGS"); extra != nullptr && *extra != '\0') {
      absl::StrAppend(&id, "; NVRTC_APPEND_FLAGS=", extra);
    }
    return id;
  }();
  return id;
}

CompiledKernel FromResult(const Specialization& spec, std::string_view arch, std::string_view cubin_arch,
                          nvrtc::CompileResult r) {
  CompiledKernel k;
  k.spec = spec;
  k.arch = std::string(arch);
  k.cubin_arch = std::string(cubin_arch);
  k.cubin = std::move(r.cubin);
  k.lowered_names = std::move(r.lowered_names);
  k.resources = std::move(r.resources);
  k.compile_ms = r.compile_ms;
  k.origin = CompiledKernel::Origin::kCompiled;
  return k;
}

cache::Entry ToEntry(const CompiledKernel& k, const std::vector<std::string>& options) {
  cache::Entry e;
  e.meta.family = k.spec.family;
  e.meta.specialization = k.spec.name;
  e.meta.arch = k.cubin_arch;
  e.meta.nvrtc_version = nvrtc::Version();
  e.meta.options = options;
  e.meta.compile_ms = k.compile_ms;
  for (const auto& [expr, lowered] : k.lowered_names) {
    cache::KernelInfo info{.name_expression = expr, .resources = {.lowered_name = lowered}};
    for (const KernelResources& r : k.resources) {
      if (r.lowered_name == lowered) info.resources = r;
    }
    // The entry file has no const_bytes; dropping it here keeps memory hits equal to disk hits.
    info.resources.const_bytes = 0;
    e.meta.kernels.push_back(std::move(info));
  }
  e.cubin = k.cubin;
  return e;
}

CompiledKernel FromEntry(const Specialization& spec, std::string_view arch, cache::Entry e,
                         cache::Origin origin) {
  CompiledKernel k;
  k.spec = spec;
  k.arch = std::string(arch);
  k.cubin_arch = e.meta.arch;
  k.cache_key = std::move(e.key);
  k.cubin = std::move(e.cubin);
  for (cache::KernelInfo& info : e.meta.kernels) {
    k.lowered_names.emplace_back(info.name_expression, info.resources.lowered_name);
    k.resources.push_back(std::move(info.resources));
  }
  k.compile_ms = e.meta.compile_ms;
  k.origin = origin;
  return k;
}

}  // namespace

StatusOr<nvrtc::CompileRequest> BuildRequest(const Specialization& spec, std::string_view arch) {
  KJIT_ASSIGN_OR_RETURN(std::string entry, KernelSource(spec.entry_source));
  nvrtc::CompileRequest req;
  req.arch = std::string(arch);
  // The program name ends up in the cubin (internal symbol names): the entry path, which the cache
  // key covers through the source; compile errors then point at the entry's file.
  req.program_name = spec.entry_source;
  req.source = std::move(entry);
  req.headers = IncludedKernelHeaders(req.source);
  req.options = spec.extra_options;
  req.name_expressions = spec.name_expressions;
  return req;
}

// Memory the kernel could give to new work (MemAvailable counts reclaimable page cache, which
// free pages alone do not); 0 when unknown.
static uint64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * page_size : 0;
}

int KernelCompiler::DefaultParallelism() {
  const uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t memory = AvailableMemoryBytes();
  const uint64_t by_memory = memory == 0 ? cores : memory / kBytesPerCompile;
  return static_cast<int>(std::max<uint64_t>(1, std::min(cores, by_memory)));
}

KernelCompiler::KernelCompiler(cache::CubinCache* cache, int max_parallel)
    : cache_(cache), max_parallel_(max_parallel > 0 ? max_parallel : DefaultParallelism()) {}

StatusOr<nvrtc::CompileResult> KernelCompiler::CompileWhenFree(const nvrtc::CompileRequest& req,
                                                                const StopFn& stop) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A stop is not signalled: looked at every 50 ms while waiting.
    while (!freed_.wait_for(lock, std::chrono::milliseconds(50), [this] { return running_ < max_parallel_; })) {
      if (stop && stop()) return Stopped();
    }
    if (stop && stop()) return Stopped();
    peak_ = std::max(peak_, ++running_);
  }
  auto result = nvrtc::Compile(req);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
  freed_.notify_one();
  return result;
}

int KernelCompiler::peak_parallel() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

StatusOr<CompiledKernel> KernelCompiler::Get(const Specialization& spec, std::string_view arch,
                                             const StopFn& stop) {
  if (stop && stop()) return Stopped();
  const std::string what = absl::StrCat(spec.family, "/", spec.name, " for ", std::string(arch));
  const std::string target = spec.target_arch ? spec.target_arch(arch) : std::string(arch);
  KJIT_RETURN_IF_ERROR(nvrtc::ValidateArch(arch));
  KJIT_RETURN_IF_ERROR(nvrtc::ValidateArch(target));
  auto req = BuildRequest(spec, target);
  if (!req.ok()) return WithContext(req.status(), what);
  if (cache_ == nullptr) {
    auto r = CompileWhenFree(*req, stop);
    if (!r.ok()) return WithContext(r.status(), what);
    return FromResult(spec, arch, target, std::move(*r));
  }
  cache::KeyInputs in;
  in.source = req->source;
  for (const nvrtc::Header& h : req->headers) in.headers.emplace_back(h.name, h.content);
  in.toolkit_id = ToolkitId();
  in.options = nvrtc::NormalizedOptions(*req);
  in.arch = req->arch;
  in.nvrtc_version = nvrtc::Version();
  in.name_expressions = req->name_expressions;
  cache::Request creq{.key = cache::ComputeKey(in), .arch = req->arch, .family = spec.family,
                      .specialization = spec.name};
  auto compile = [&]() -> StatusOr<cache::Entry> {
    KJIT_ASSIGN_OR_RETURN(nvrtc::CompileResult r, CompileWhenFree(*req, stop));
    return ToEntry(FromResult(spec, arch, target, std::move(r)), in.options);
  };
  cache::Origin origin = cache::Origin::kCompiled;
  auto entry = cache_->GetOrCreate(creq, compile, &origin);
  if (!entry.ok()) return WithContext(entry.status(), what);
  if (entry->key.empty()) entry->key = creq.key;
  return FromEntry(spec, arch, std::move(*entry), origin);
}

std::vector<StatusOr<CompiledKernel>> KernelCompiler::GetAll(
    const std::vector<Specialization>& specs, const std::vector<std::string>& archs,
    std::function<void(int, int, const CompiledKernel*, const Status&)> progress, bool keep_results,
    const StopFn& stop) {
  const int total = static_cast<int>(specs.size() * archs.size());
  std::vector<StatusOr<CompiledKernel>> results(total, absl::UnknownError("not compiled"));
  std::atomic<int> next{0};
  std::mutex progress_mu;
  int done = 0;
  auto worker = [&] {
    for (int i = next++; i < total; i = next++) {
      const Specialization& spec = specs[i / archs.size()];
      StatusOr<CompiledKernel> r = Get(spec, archs[i % archs.size()], stop);
      if (absl::IsCancelled(r.status()) && stop && stop()) {  // not reported: the caller has stopped
        results[i] = r.status();
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(progress_mu);
        ++done;
        if (progress) progress(done, total, r.ok() ? &*r : nullptr, r.status());
      }
      if (keep_results) {
        results[i] = std::move(r);
      } else if (!r.ok()) {
        results[i] = r.status();
      } else {
        results[i] = absl::CancelledError("released after its progress call (keep_results false)");
      }
    }
  };
  // Threads beside the caller's: at most max_parallel_ - 1 across every call at once, so that many
  // callers at once each compile on their own thread instead of adding threads that would only wait
  // for a free compile.
  int extra = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    extra = std::max(0, std::min(total - 1, max_parallel_ - 1 - extra_threads_));
    extra_threads_ += extra;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < extra; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    extra_threads_ -= extra;
  }
  return results;
}

}  // namespace kjit::kernels
