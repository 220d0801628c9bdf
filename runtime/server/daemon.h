// Everything the services share: devices, loaded kernels, regions, sessions, the cache.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "jit_cache/cubin_cache.h"
#include "runtime/ipc/region_registry.h"
#include "runtime/ipc/registration.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/launch/device_runtime.h"
#include "runtime/launch/launcher.h"
#include "runtime/server/flags.h"
#include "runtime/server/ring_table.h"
#include "runtime/server/sessions.h"

namespace kjit::server {

struct Daemon {
  Daemon();
  Flags flags;
  std::string tcp_token;  // --token-file's token ("": none); never logged
  std::vector<std::unique_ptr<launch::DeviceRuntime>> devices;  // empty: compile-only
  std::string compile_only_reason;                      // why devices is empty
  std::unique_ptr<cache::CubinCache> cache;
  std::unique_ptr<kernels::KernelCompiler> compiler;
  ipc::RegionRegistry regions;
  RingTable rings{&regions};  // launch rings on system regions (declared after them: stopped first)
  SessionTable sessions;
  launch::Launcher launcher;  // every ModelInfer's path, gRPC and ring alike
  std::atomic<bool> ready{false};
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // Set when a launch left a CUDA context unusable (sticky error such as an illegal address): the
  // daemon stops accepting work and exits non-zero so that its supervisor restarts it (the cubin
  // cache on disk stays valid). In-flight requests fail with the CUDA error.
  std::atomic<bool> poisoned{false};
  void MarkPoisoned(const std::string& why);

  // Compiled cubins by "family/specialization/arch" (startup and Compile calls).
  std::mutex compiled_mu;
  std::map<std::string, kernels::CompiledKernel> compiled;
  void AddCompiled(const kernels::CompiledKernel& k);
  StatusOr<kernels::CompiledKernel> FindCompiled(const std::string& family,
                                                 const std::string& spec,
                                                 const std::string& arch);

  // FAILED_PRECONDITION in compile-only mode; INVALID_ARGUMENT for an ordinal out of range.
  StatusOr<launch::DeviceRuntime*> Device(int64_t ordinal);
};

// The device a CUDA registration names, with the client's kjit-device-uuid checked against it
// (`kind` and `name` say what is registered, for messages). Valid while ctx and name live.
ipc::DeviceResolver DeviceResolverOf(Daemon* d, const grpc::ServerContext& ctx, const char* kind,
                                     const std::string& name);

// Given the process's device enumeration (an error or no device: compile-only), compiles the
// catalog for every distinct arch (+ --arch extras) with a progress line on stderr, loads modules
// per device. Compile failures are reported and fatal only when a device ends up without its
// kernels.
// `stop` (may be empty) is asked between the catalog's compiles: once it says so, the compiles not
// yet started are dropped and StartDaemon returns CANCELLED.
Status StartDaemon(Daemon* d, const StatusOr<std::vector<driver::DeviceInfo>>& devices,
                   const kernels::KernelCompiler::StopFn& stop = {});

}  // namespace kjit::server
