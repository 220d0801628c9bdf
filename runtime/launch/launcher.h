// The one launch path of the daemon, whatever the transport: from a LaunchRequest to kernels queued
// on a GPU and a LaunchResult.
//
//   Check     the family's checks on the descriptions and parameters, before any memory is touched
//   Locate    regions and events looked up and bounded; every CUDA one on the launch's GPU
//   Bound     index pointers in host memory read and checked; on the GPU read back and checked, or
//             left to the kernels (an asynchronous launch, or one that gives the family's bounds)
//   Plan      the family's plan for the device
//   Stage     host and system-memory tensors copied into the device's staging
//   Enqueue   optional wait on the client's event, the kernels, optional signal event
//   Finish    synchronous: one stream synchronization, outputs and the error word read back;
//             asynchronous: the launch's references held until it has run, the reply sent at once
//
// The in-process client (client/) runs Check, Bound (AssumeBounds), Plan and Enqueue of the same
// FamilyLaunch on its caller's stream and workspace (kernels::FamilyLaunch).
#pragma once

#include <functional>
#include <memory>
#include <atomic>
#include <chrono>
#include <span>
#include <string>

#include "runtime/ipc/region_registry.h"
#include "runtime/kernels/family.h"
#include "runtime/launch/device_runtime.h"
#include "runtime/launch/launch_request.h"

namespace kjit::launch {

// Parameters every launch takes next to its family's: kjit_device (the GPU ordinal in the daemon's
// numbering), kjit_wait_event and kjit_signal_event (registered IPC events; a signal event makes the
// launch asynchronous: the reply comes once it is queued).
std::span<const kernels::ParamSchema> LaunchParamSchema();

class Launcher {
 public:
  struct Options {
    const ipc::RegionRegistry* regions = nullptr;
    // The device of an ordinal, or why there is none to launch on (starting, compile-only, out of range).
    std::function<StatusOr<DeviceRuntime*>(int64_t ordinal)> device;
    // Called when a launch left its device's context unusable (a sticky CUDA error).
    std::function<void(const std::string& why)> poisoned;
  };
  explicit Launcher(Options options) : options_(std::move(options)) {}

  // How long a synchronous launch may wait on the host (default kDefaultTimeout): first for its
  // kjit_wait_event, before the GPU is locked (past it: DEADLINE_EXCEEDED, nothing launched, no
  // other launch delayed), then for its work on the GPU. Work still queued then (its stream waits
  // behind an asynchronous launch's kjit_wait_event that has not completed) is left to the stream
  // with what it uses held, the call answers DEADLINE_EXCEEDED, and the GPU refuses launches
  // (UNAVAILABLE, naming what its stream waits for) until the stream has drained, instead of
  // holding every caller's thread behind it.
  static constexpr std::chrono::milliseconds kDefaultTimeout{10000};
  void SetTimeout(std::chrono::milliseconds t) { timeout_ms_.store(t.count(), std::memory_order_relaxed); }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load(std::memory_order_relaxed));
  }
  // At most this many bytes of a launch's tensors in system memory (inputs, and outputs'
  // capacities), which it stages through page-locked host memory and the GPU: RESOURCE_EXHAUSTED
  // past it, before a GPU is involved. Without a cap one request could pin most of the host's
  // memory and take GPU memory from the inference process beside kjitd.
  static constexpr uint64_t kDefaultMaxStagingBytes = uint64_t{8} << 30;
  void SetMaxStagingBytes(uint64_t bytes) { max_staging_bytes_.store(bytes, std::memory_order_relaxed); }

  // INVALID_ARGUMENT naming what to fix for a bad request; NOT_FOUND for an unknown region or event;
  // FAILED_PRECONDITION / UNAVAILABLE when no device can run it; the kernels' errors as the family
  // reports them. `result` is filled as far as the launch got (family, outputs' descriptions).
  Status Run(const LaunchRequest& request, LaunchResult* result) const;

  // What a launch's error on `dev` becomes: when the error (INTERNAL, as driver::Check reports a
  // failed launch) left the context unusable, Options::poisoned is called and the answer is
  // UNAVAILABLE (the daemon stops to be restarted: a later call may succeed); otherwise `error`.
  Status AfterDeviceError(DeviceRuntime* dev, Status error) const;

 private:
  Options options_;
  std::atomic<int64_t> timeout_ms_{kDefaultTimeout.count()};
  std::atomic<uint64_t> max_staging_bytes_{kDefaultMaxStagingBytes};
};

}  // namespace kjit::launch
