// Catalog specialization + arch -> cubin, through the cubin cache when one is given; and the
// modules of one device loaded from those cubins.
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "jit_cache/cubin_cache.h"
#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/catalog.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::kernels {

struct CompiledKernel {
  Specialization spec;
  std::string arch;        // the arch it was asked for (a device's, e.g. "sm_90")
  std::string cubin_arch;  // the arch NVRTC compiled for (Specialization::target_arch, e.g. "sm_90a");
                           // LoadedKernels checks this one against the device
  std::string cache_key;  // hex digest; empty when compiled without a cache
  std::vector<char> cubin;
  std::vector<std::pair<std::string, std::string>> lowered_names;  // name expression -> lowered
  std::vector<KernelResources> resources;
  double compile_ms = 0;
  using Origin = cache::Origin;  // cache::OriginName names it
  Origin origin = Origin::kCompiled;
};

// The NVRTC request of one specialization for one arch: the entry source, the kernel headers
// it includes (IncludedKernelHeaders), the spec's options and name expressions. Exposed so tools
// can show or key it.
StatusOr<nvrtc::CompileRequest> BuildRequest(const Specialization& spec, std::string_view arch);

class KernelCompiler {
 public:
  // cache may be null (no caching). max_parallel <= 0: bounded by cores and memory (~500 MB each).
  explicit KernelCompiler(cache::CubinCache* cache, int max_parallel = 0);

  // Whether the caller no longer wants what it asked for (its client cancelled or left, the daemon
  // is stopping): checked before each item and while waiting for a free compile, never during one
  // (NVRTC cannot be interrupted). An empty function never stops.
  using StopFn = std::function<bool()>;

  StatusOr<CompiledKernel> Get(const Specialization& spec, std::string_view arch, const StopFn& stop = {});

  // Every (spec, arch) pair, specs-major: result index = spec_index * archs.size() + arch_index.
  // Compiled on the caller's thread and up to max_parallel - 1 more, fewer while other calls hold
  // such threads.
  // progress(done, total, kernel or null, status) is called once per item, serialized. Without
  // keep_results each item's kernel is released once its progress call returns (its result then
  // keeps only its status), so a call holds at most the kernels being compiled or reported. Once
  // stop() says so, the items not yet started are not compiled (CANCELLED, no progress call).
  std::vector<StatusOr<CompiledKernel>> GetAll(
      const std::vector<Specialization>& specs, const std::vector<std::string>& archs,
      std::function<void(int, int, const CompiledKernel*, const Status&)> progress = {}, bool keep_results = true,
      const StopFn& stop = {});

  // At most this many NVRTC compiles run at once, across every caller of Get and GetAll (each
  // takes about 500 MB: concurrent callers, e.g. a daemon's clients, wait for a free one).
  int max_parallel() const { return max_parallel_; }
  // The most NVRTC compiles that have run at once.
  int peak_parallel() const;

  // Cores and memory bound used when max_parallel <= 0.
  static int DefaultParallelism();

 private:
  // Runs one NVRTC compile once fewer than max_parallel_ run (CANCELLED if stop() says so first).
  StatusOr<nvrtc::CompileResult> CompileWhenFree(const nvrtc::CompileRequest& req, const StopFn& stop);

  cache::CubinCache* cache_;
  int max_parallel_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  int running_ = 0, peak_ = 0;
  int extra_threads_ = 0;  // GetAll's threads beside its callers', all calls together
};

// Modules of one device (the device's context current on the calling thread). Resolves EVERY
// lowered name at load (lazy loading hides wrong-arch cubins until lookup), checks the recorded
// arch against the device's, and lets every kernel use the device's opt-in shared memory (the
// launchers do not set it per launch).
class LoadedKernels : public KernelTable {
 public:
  static StatusOr<std::unique_ptr<LoadedKernels>> Load(const std::vector<CompiledKernel>& kernels,
                                                      const driver::DeviceInfo& device);
  StatusOr<CUfunction> Function(std::string_view family, std::string_view specialization,
                                std::string_view name_expression) const override;

 private:
  LoadedKernels() = default;
  std::vector<driver::Module> modules_;
  // (family, specialization, name expression) -> function; looked up on every launch, so by views
  // into the keys, with no string built.
  struct Key {
    std::string family, specialization, expression;
  };
  struct KeyLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      using View = std::tuple<std::string_view, std::string_view, std::string_view>;
      return View(a.family, a.specialization, a.expression) < View(b.family, b.specialization, b.expression);
    }
  };
  struct KeyView {
    std::string_view family, specialization, expression;
  };
  std::map<Key, CUfunction, KeyLess> functions_;
};

// "sm_120a" -> {120, 'a'}, "sm_90" -> {90, 0}; number 0 when malformed.
std::pair<int, char> ParseArch(std::string_view arch);

// True when a cubin compiled for `arch` runs on a device of `device_arch` (exact match, or the
// arch-specific variant of the device's own arch: sm_90a on sm_90).
bool ArchRunsOn(std::string_view arch, std::string_view device_arch);

}  // namespace kjit::kernels
