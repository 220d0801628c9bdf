// One GPU as the daemon uses it: its primary context, one stream, the loaded kernels, and
// daemon-owned device memory reused across launches (the families' workspace, and staging for
// inputs and outputs that do not live in CUDA regions). Launches on a device are serialized by
// its mutex; the stream orders them on the GPU.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::server {

class DeviceRuntime {
 public:
  // Retains the primary context and creates the stream; the context is left current.
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

  // Buffers of at least `bytes` (grown, never shrunk; contents not kept), for work queued on
  // stream() after this call. Growing is stream-ordered (the old buffer is freed after the work
  // queued before it, the new one allocated on the stream): no host synchronization, so a launch
  // never waits for asynchronous launches still queued behind a client's event. Hold mu().
  StatusOr<CUdeviceptr> Workspace(size_t bytes) { return Grow(&workspace_, bytes); }
  StatusOr<CUdeviceptr> Staging(size_t bytes) { return Grow(&staging_, bytes); }

  // The page-locked host word, mapped into the device, that a synchronous launch reads its error
  // word from: the kernels store it there (MlaVerifyBuffers::error_word) or a copy queued after them
  // does, and one stream synchronization covers both. Hold mu().
  struct MappedWord {
    uint32_t* host = nullptr;
    CUdeviceptr device = 0;
  };
  StatusOr<MappedWord> MappedErrorWord();

  // Page-locked host staging of at least `bytes` (grown, never shrunk; contents not kept): the
  // host side of truly asynchronous copies. Hold mu(), and have every copy queued from or into it
  // finished (its stream synchronized) before releasing mu(): the next launch reuses the same
  // bytes, and growing frees the old ones without waiting for any stream.
  StatusOr<uint8_t*> PinnedStaging(size_t bytes) { return GrowPinned(&pinned_staging_, bytes); }

  // Page-locked host staging for one asynchronous launch's inputs, whose copies run after the call
  // returns (a large copy from pageable memory may first wait for everything queued on the stream:
  // earlier asynchronous launches and the client work they wait for). Blocks of power-of-two sizes
  // from 4 KiB, reused (the smallest free one that fits): the returned pointer's deleter hands its
  // block back, so keep it in the launch's HoldUntilDone refs. At most kMaxAsyncStagingBytes are
  // registered; past that, free blocks are released only while no asynchronous launch is in flight
  // (unregistering waits for the GPU to go idle), else RESOURCE_EXHAUSTED. Hold mu(), also where the
  // last reference is dropped (Reap, or the launch's error path, which synchronizes the stream
  // before it releases mu()).
  static constexpr size_t kMaxAsyncStagingBytes = size_t{256} << 20;
  StatusOr<std::shared_ptr<uint8_t>> AcquireAsyncStaging(size_t bytes);

  size_t in_flight() const { return in_flight_.size(); }  // held launches not yet reaped

  // Asynchronous launches. HoldUntilDone keeps `refs` (regions, events) alive until the work queued
  // on the stream so far has finished; Reap drops those whose work is done. A launch's kernel error
  // word is read only then: AcquireErrorWord hands out a page-locked word, mapped into the device,
  // for the launch's kernels to store their error word into (or for a copy queued after them)
  // (RESOURCE_EXHAUSTED with kMaxAsyncErrorWords launches in flight); HoldUntilDone with `watch`
  // keeps it until Reap finds the work done and, when the word is nonzero, files
  // watch.report(word) under each of watch.events (the launch's events: name, and the registration,
  // so that a report never reaches a later event registered under the same name). Hold mu().
  static constexpr size_t kMaxAsyncErrorWords = 4096;
  struct WatchedEvent {
    std::string name;
    std::weak_ptr<const void> registration;
  };
  struct ErrorWatch {
    uint32_t* word = nullptr;
    std::vector<WatchedEvent> events;
    std::function<std::string(uint32_t)> report;
  };
  StatusOr<MappedWord> AcquireErrorWord();
  void ReleaseErrorWord(uint32_t* word) { free_words_.push_back(word); }  // not queued after all
  Status HoldUntilDone(std::vector<std::shared_ptr<const void>> refs, ErrorWatch watch);
  // Drops the finished launches, logging (warn) the report of each that failed.
  void Reap();
  // The report filed under the event `name` (registration `registration`) by an earlier launch,
  // removed (under every event it was filed under); empty when none. Hold mu().
  std::string TakeAsyncFailure(const std::string& name, const std::shared_ptr<const void>& registration);

 private:
  DeviceRuntime(driver::DeviceInfo info, driver::Context ctx, driver::Stream stream, driver::Stream readback)
      : info_(std::move(info)), ctx_(std::move(ctx)), stream_(std::move(stream)), readback_(std::move(readback)) {}
  // Buffers allocated on stream() (driver::DeviceBuffer::AllocOnStream).
  StatusOr<CUdeviceptr> Grow(std::optional<driver::DeviceBuffer>* buf, size_t bytes);
  // Page-locked host buffers of at least `bytes` (grown, never shrunk; contents not kept); sizes
  // past 4 KiB round up to 1 MiB. MapPinned also maps the buffer into the device: its device address.
  StatusOr<uint8_t*> GrowPinned(std::optional<driver::PinnedHostBuffer>* buf, size_t bytes, unsigned register_flags = 0);
  StatusOr<CUdeviceptr> MapPinned(std::optional<driver::PinnedHostBuffer>* buf, size_t bytes);

  driver::DeviceInfo info_;
  driver::Context ctx_;
  driver::Stream stream_, readback_;
  std::unique_ptr<kernels::LoadedKernels> kernels_;
  std::optional<driver::DeviceBuffer> workspace_, staging_;
  // AcquireAsyncStaging's blocks (declared before in_flight_, whose refs hand blocks back into
  // free_staging_ when they are destroyed) and the free ones by size.
  std::vector<driver::PinnedHostBuffer> async_staging_;
  std::multimap<size_t, uint8_t*> free_staging_;
  size_t async_staging_bytes_ = 0;  // registered, in use or free
  struct InFlight {
    driver::Event done;
    std::vector<std::shared_ptr<const void>> refs;
    ErrorWatch watch;
  };
  std::deque<InFlight> in_flight_;
  std::vector<driver::Event> spare_events_;  // completion events of reaped launches, for reuse
  std::optional<driver::PinnedHostBuffer> pinned_staging_, async_words_, mapped_word_;
  CUdeviceptr mapped_word_device_ = 0;
  std::vector<uint32_t*> free_words_;
  CUdeviceptr async_words_device_ = 0;  // the device address of async_words_
  // Event name -> (registration, report); a launch's report is filed under each of its events and
  // delivered once. Entries whose registration is gone are dropped by Reap.
  struct AsyncFailure {
    std::weak_ptr<const void> registration;
    std::shared_ptr<const std::string> report;
  };
  std::map<std::string, AsyncFailure> async_failures_;
  std::mutex mu_;
};

}  // namespace kjit::server
