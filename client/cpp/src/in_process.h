// In-process launches (the in-process and embedded modes): a family's cubins loaded into each
// device's primary context (the one torch uses) and launched on the caller's stream through the
// family's own checks and plan (kernels::FamilyLaunch), exactly as kjitd launches them. Nothing per
// call allocates, synchronizes or talks to the daemon, so a CUDA-graph capture of the stream works.
#pragma once

#include <cuda.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/cpp/include/kjit_client.h"
#include "client/cpp/src/verify_args.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/family.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::client {

// Where cubins come from: kjitd's GetKernel (in-process) or NVRTC through the cache (embedded).
// Returns every specialization of the family for `arch`.
using CubinSource = std::function<StatusOr<std::vector<kernels::CompiledKernel>>(const std::string& arch)>;

class InProcessLauncher {
 public:
  InProcessLauncher(const kernels::KernelFamily* family, CubinSource source)
      : family_(family), source_(std::move(source)) {}

  // The family's cubins for `arch`, fetched once (no GPU needed).
  Status Prepare(const std::string& arch);

  // Queues the call on `stream` with the caller's workspace. RESOURCE_EXHAUSTED with *needed set
  // when the workspace is smaller than the plan's (nothing queued). A call whose tensors' layouts
  // and parameters equal the last call's (a decode step's layers) reuses its checked and planned
  // launch with the new addresses: the checks and the plan depend on nothing else.
  Status Launch(const kjit_mla_verify_args& args, CUstream stream, uint64_t* needed);

  // Synchronizes `stream` (null: the device), then reads and clears the device's accumulated error
  // word: the family's message for the bits found, OK for none.
  Status CheckErrors(int64_t device, CUstream stream);

 private:
  struct Device {
    driver::DeviceInfo info;
    std::optional<driver::Context> context;  // the primary context, retained
    std::unique_ptr<kernels::LoadedKernels> kernels;
    std::optional<driver::DeviceBuffer> accumulated;  // the kernels OR their error bits into its first word
  };
  // The device's state, loaded on first use (the one call that may take a while: keep it out of a
  // graph capture by calling once before).
  StatusOr<Device*> DeviceFor(int64_t ordinal);
  StatusOr<const std::vector<kernels::CompiledKernel>*> Cubins(const std::string& arch);

  // The last call's launch, by its arguments with every address zeroed.
  struct Planned {
    kjit_mla_verify_args layout{};
    std::unique_ptr<kernels::FamilyLaunch> launch;
    kernels::LaunchNeeds needs;
    Device* device = nullptr;
  };
  static kjit_mla_verify_args LayoutOf(const kjit_mla_verify_args& args);
  StatusOr<Planned> Check(const kjit_mla_verify_args& args);

  const kernels::KernelFamily* family_;
  CubinSource source_;
  std::mutex last_mu_;
  Planned last_;
  std::mutex mu_;
  std::map<std::string, std::vector<kernels::CompiledKernel>> cubins_;  // by arch
  std::map<int64_t, std::unique_ptr<Device>> devices_;                  // by ordinal
  static constexpr int kFastDevices = 16;
  std::atomic<Device*> fast_[kFastDevices] = {};  // lock-free lookups once loaded
};

}  // namespace kjit::client
