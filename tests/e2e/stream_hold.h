// StreamHold: holds a client's CUDA stream on a page-locked flag, to check that kjitd replies to
// an asynchronous launch without waiting for the client's GPU work queued before its wait event.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
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
    std::unique_ptr<StreamHold> h(new StreamHold(stream));
    h->flag_ = static_cast<uint32_t*>(std::aligned_alloc(4096, 4096));
    if (h->flag_ == nullptr) return absl::ResourceExhaustedError("no memory for the stream hold's flag");
    *h->flag_ = 0;
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemHostRegister(h->flag_, 4096, CU_MEMHOSTREGISTER_DEVICEMAP),
                                       "cuMemHostRegister(flag)"));
    h->registered_ = true;
    CUdeviceptr dev = 0;
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemHostGetDevicePointer(&dev, h->flag_, 0), "flag device pointer"));
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
    auto api = driver::Get();
    if (registered_ && api.ok()) {
      (void)(*api)->cuStreamSynchronize(stream_);  // the wait has passed: the flag can go
      (void)(*api)->cuMemHostUnregister(flag_);
    }
    std::free(flag_);
  }

 private:
  explicit StreamHold(CUstream stream) : stream_(stream) {}
  void Open() {
    __atomic_store_n(flag_, 1u, __ATOMIC_RELEASE);
  }
  CUstream stream_;
  uint32_t* flag_ = nullptr;
  bool registered_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::thread watchdog_;
};

}  // namespace kjit::e2e
