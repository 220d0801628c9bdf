#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "runtime/common/client_text.h"
#include "runtime/kernels/registry.h"
#include "runtime/server/daemon.h"
#include "runtime/common/log.h"
#include "runtime/server/metrics.h"

namespace kjit::server {
namespace {

std::string CompiledKey(const std::string& family, const std::string& spec, const std::string& arch) {
  return absl::StrCat(family, "/", spec, "/", arch);
}

}  // namespace

Daemon::Daemon()
    : launcher(launch::Launcher::Options{
          .regions = &regions,
          .device = [this](int64_t ordinal) { return Device(ordinal); },
          .poisoned = [this](const std::string& why) { MarkPoisoned(why); },
      }) {}

void Daemon::AddCompiled(const kernels::CompiledKernel& k) {
  RecordCompile(k);
  std::lock_guard<std::mutex> lock(compiled_mu);
  compiled[CompiledKey(k.spec.family, k.spec.name, k.arch)] = k;
}

StatusOr<kernels::CompiledKernel> Daemon::FindCompiled(const std::string& family,
                                                       const std::string& spec,
                                                       const std::string& arch) {
  std::lock_guard<std::mutex> lock(compiled_mu);
  auto it = compiled.find(CompiledKey(family, spec, arch));
  if (it == compiled.end()) {
    return absl::NotFoundError(absl::StrCat("no compiled kernel ", family, "/", spec, " for ", arch));
  }
  return it->second;
}

void Daemon::MarkPoisoned(const std::string& why) {
  if (poisoned.exchange(true)) return;
  ready = false;
  Log(LogLevel::kError, absl::StrCat("CUDA context unusable (", why, "): stopping to be restarted"));
  kill(getpid(), SIGTERM);  // the main thread's sigwait turns this into an orderly, non-zero exit
}

StatusOr<launch::DeviceRuntime*> Daemon::Device(int64_t ordinal) {
  if (!ready.load()) {  // devices is written by startup until ready is set
    return absl::UnavailableError(poisoned.load() ? "stopping after a CUDA error" : "starting: kernels not loaded yet");
  }
  if (devices.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kjitd runs compile-only (", compile_only_reason, "): no GPU to launch on"));
  }
  if (ordinal < 0 || ordinal >= static_cast<int64_t>(devices.size())) {
    return absl::InvalidArgumentError(absl::StrCat("device ", ordinal, " out of range (", devices.size(),
                                                   " GPUs)"));
  }
  return devices[ordinal].get();
}

ipc::DeviceResolver DeviceResolverOf(Daemon* d, const grpc::ServerContext& ctx, const char* kind,
                                     const std::string& name) {
  return [d, &ctx, kind, &name](int64_t device_id) -> StatusOr<const driver::Context*> {
    KJIT_ASSIGN_OR_RETURN(launch::DeviceRuntime * dev, d->Device(device_id));
    KJIT_RETURN_IF_ERROR(CheckDeviceUuid(ctx, absl::StrCat(kind, " '", ClientText(name), "'"),
                                         static_cast<int>(device_id), dev->info().uuid));
    return &dev->context();
  };
}

Status StartDaemon(Daemon* d, const StatusOr<std::vector<driver::DeviceInfo>>& devices,
                   const kernels::KernelCompiler::StopFn& stop) {
  cache::Options copts;
  copts.dir = d->flags.cache_dir;
  d->cache = cache::CubinCache::Open(copts);
  if (!d->cache->warning().empty()) Log(LogLevel::kWarn, d->cache->warning());
  d->compiler = std::make_unique<kernels::KernelCompiler>(d->cache.get());

  std::vector<driver::DeviceInfo> infos;
  if (!devices.ok()) {
    d->compile_only_reason = std::string(devices.status().message());
  } else if (devices->empty()) {
    d->compile_only_reason = "compile-only: no CUDA device";
  } else {
    infos = *devices;
  }
  if (infos.empty()) Log(LogLevel::kInfo, d->compile_only_reason);
  std::vector<std::string> archs;
  for (const auto& info : infos) {
    Log(LogLevel::kInfo, absl::StrCat("GPU ", info.ordinal, ": ", info.name, " (", info.arch, ", ",
                                      info.sm_count, " SMs)"));
    archs.push_back(info.arch);
  }
  for (const auto& a : d->flags.archs) archs.push_back(a);
  std::sort(archs.begin(), archs.end());
  archs.erase(std::unique(archs.begin(), archs.end()), archs.end());

  const auto& specs = kernels::Catalog();
  if (!archs.empty() && !specs.empty()) {
    const bool tty = isatty(2);
    auto results = d->compiler->GetAll(
        specs, archs, [&](int done, int total, const kernels::CompiledKernel* k, const Status& s) {
          std::string line = absl::StrCat("kernels ", done, "/", total);
          if (k != nullptr) absl::StrAppend(&line, ": ", k->spec.family, "/", k->spec.name, " ", k->arch, " (", cache::OriginName(k->origin), ")");
          if (!s.ok()) absl::StrAppend(&line, ": FAILED ", s.message());
          if (tty && s.ok() && done < total) {
            fprintf(stderr, "\r\033[Kkjitd info: %s", line.c_str());
          } else {
            if (tty) fprintf(stderr, "\r\033[K");
            Log(s.ok() ? LogLevel::kInfo : LogLevel::kError, line);
          }
        },
        /*keep_results=*/true, stop);
    if (stop && stop()) {
      return absl::CancelledError("stopped during startup: the catalog's compiles not yet started were dropped");
    }
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i].ok()) d->AddCompiled(*results[i]);
    }
  }
  for (const auto& info : infos) {
    KJIT_ASSIGN_OR_RETURN(auto dev, launch::DeviceRuntime::Create(info));
    std::vector<kernels::CompiledKernel> mine;
    for (const auto& spec : specs) {
      auto k = d->FindCompiled(spec.family, spec.name, info.arch);
      if (!k.ok()) {
        return WithContext(k.status(), absl::StrCat("GPU ", info.ordinal, " cannot serve: kernel missing"));
      }
      mine.push_back(*std::move(k));
    }
    KJIT_ASSIGN_OR_RETURN(auto loaded, kernels::LoadedKernels::Load(mine, info));
    dev->SetKernels(std::move(loaded));
    d->devices.push_back(std::move(dev));
  }
  // The compiles ran on a pool of threads, each growing a malloc arena of its own that glibc keeps
  // once freed (an H200 host's 16 parallel compiles left kjitd at 572 MB of RSS against about 200
  // MB from a warm cache): hand the free pages back once.
  malloc_trim(0);
  d->ready = true;
  return absl::OkStatus();
}

}  // namespace kjit::server
