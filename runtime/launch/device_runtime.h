// One GPU as the launcher uses it: its primary context, the launch stream and the read-back
// stream, the loaded kernels, daemon-owned memory reused across launches (staging.h), the error
// words (error_words.h) and the asynchronous launches in flight (in_flight.h). Launches on a device
// are serialized by its mutex; the stream orders them on the GPU.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/launch/error_words.h"
#include "runtime/launch/in_flight.h"
#include "runtime/launch/staging.h"

namespace kjit::launch {

class DeviceRuntime {
 public:
  // Retains the primary context and creates the streams; the context is left current.
  static StatusOr<std::unique_ptr<DeviceRuntime>> Create(const driver::DeviceInfo& info);

  const driver::DeviceInfo& info() const { return info_; }
  const driver::Context& context() const { return ctx_; }
  CUstream stream() const { return stream_.get(); }
  // A second stream for reading device-resident index pointers back before the launch: the
  // read-back never waits for asynchronous launches queued on stream() (one may wait on a client
  // event that the client records only after this request returns).
  CUstream readback_stream() const { return readback_.get(); }
  std::mutex& mu() { return mu_; }

  // Loaded modules; null until SetKernels (then immutable).
  const kernels::LoadedKernels* kernels() const { return kernels_.get(); }
  void SetKernels(std::unique_ptr<kernels::LoadedKernels> k) { kernels_ = std::move(k); }

  // Hold mu() for these.
  DeviceStaging& staging() { return staging_; }
  ErrorWords& error_words() { return words_; }
  InFlightLaunches& in_flight() { return in_flight_; }

  // Drops the asynchronous launches that have run, unless a launch holds mu() right now (it reaps
  // them itself). A finished launch still holds its regions and events: without this, the last
  // launches before the daemon goes idle keep a departed client's CUDA memory mapped, and charged
  // to kjitd, until the next launch on the GPU. Also ends a block (Block) once the stream has
  // drained. Returns how many are still in flight.
  size_t ReapFinished();

  // A synchronous launch that ran out of time left work queued on stream() (Launcher::SetTimeout):
  // until the stream has run it, launches are refused rather than queued behind it. `why` says what
  // the stream waits for. Hold mu() for both.
  void Block(std::string why) {
    blocked_ = std::move(why);
    blocked_flag_.store(true, std::memory_order_relaxed);
  }
  // OK, or UNAVAILABLE while blocked and the stream still busy (the block ends once it has drained).
  Status CheckUnblocked();
  // Whether launches are refused (as last seen; no lock needed), and why ("" when not; hold mu()).
  bool blocked() const { return blocked_flag_.load(std::memory_order_relaxed); }
  const std::string& blocked_reason() const { return blocked_; }

 private:
  DeviceRuntime(driver::DeviceInfo info, driver::Context ctx, driver::Stream stream, driver::Stream readback)
      : info_(std::move(info)), ctx_(std::move(ctx)), stream_(std::move(stream)), readback_(std::move(readback)),
        staging_(info_.ordinal, stream_.get()), words_(info_.ordinal), in_flight_(stream_.get(), &words_) {}

  driver::DeviceInfo info_;
  driver::Context ctx_;
  driver::Stream stream_, readback_;
  std::unique_ptr<kernels::LoadedKernels> kernels_;
  // In this order: in-flight launches hold staging blocks and error words, and go first.
  DeviceStaging staging_;
  ErrorWords words_;
  InFlightLaunches in_flight_;
  std::string blocked_;  // "" unless Block() and the stream not yet seen drained
  std::atomic<bool> blocked_flag_{false};
  std::mutex mu_;
};

}  // namespace kjit::launch
