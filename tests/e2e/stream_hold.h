// StreamHold: holds a client's CUDA stream on a page-locked flag, to check that kjitd replies to
// an asynchronous launch without waiting for the client's GPU work queued before its wait event.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "runtime/driver/cuda_driver.h"

namespace kjit::e2e {

// Holds a stream: it waits (cuStreamWaitValue32) on a page-locked flag until Release(), or until a
// watchdog releases it after `limit`, so that a daemon that waits for this stream delays its reply
// past the limit instead of deadlocking the test.
class StreamHold {
 public:
  static StatusOr<std::unique_ptr<StreamHold>> Start(CUstream stream, std::chrono::milliseconds limit) {
    KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
    KJIT_ASSIGN_OR_RETURN(driver::PinnedHostBuffer flag,
                          driver::PinnedHostBuffer::Alloc(sizeof(uint32_t), CU_MEMHOSTREGISTER_DEVICEMAP));
    std::unique_ptr<StreamHold> h(new StreamHold(stream, std::move(flag)));
    KJIT_ASSIGN_OR_RETURN(const CUdeviceptr dev, h->flag_->DevicePointer());
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamWaitValue32(stream, dev, 1, CU_STREAM_WAIT_VALUE_GEQ),
                                       "cuStreamWaitValue32(flag)"));
    StreamHold* raw = h.get();
    h->watchdog_ = std::thread([raw, limit] {
      std::unique_lock<std::mutex> lock(raw->mu_);
      raw->cv_.wait_for(lock, limit, [raw] { return raw->released_; });
      raw->Open();
    });
    return h;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }
  ~StreamHold() {
    Release();
    if (auto api = driver::Get(); api.ok()) {
      (void)(*api)->cuStreamSynchronize(stream_);  // the wait has passed: the flag can go
    }
    flag_.reset();
  }

 private:
  StreamHold(CUstream stream, driver::PinnedHostBuffer flag) : stream_(stream), flag_(std::move(flag)) {
    *Word() = 0;
  }
  uint32_t* Word() { return reinterpret_cast<uint32_t*>(flag_->data()); }
  void Open() { __atomic_store_n(Word(), 1u, __ATOMIC_RELEASE); }
  CUstream stream_;
  std::optional<driver::PinnedHostBuffer> flag_;  // page-locked, mapped into the device
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::thread watchdog_;
};

}  // namespace kjit::e2e
