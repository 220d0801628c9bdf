#include "runtime/launch/reaper.h"

namespace kjit::launch {

IdleReaper::IdleReaper(std::vector<DeviceRuntime*> devices, std::chrono::milliseconds period)
    : devices_(std::move(devices)), period_(period) {
  if (!devices_.empty()) thread_ = std::thread([this] { Loop(); });
}

IdleReaper::~IdleReaper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void IdleReaper::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    for (DeviceRuntime* dev : devices_) dev->ReapFinished();
    lock.lock();
  }
}

}  // namespace kjit::launch
