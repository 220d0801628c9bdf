// A thread that drops finished asynchronous launches while a GPU is idle (DeviceRuntime::
// ReapFinished), so that a departed client's regions and events are unmapped and destroyed once its
// last launches have run, not at the next launch of some other client.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/launch/device_runtime.h"

namespace kjit::launch {

class IdleReaper {
 public:
  // Looks at every device each `period`; the devices outlive the reaper.
  IdleReaper(std::vector<DeviceRuntime*> devices, std::chrono::milliseconds period);
  ~IdleReaper();  // stops and joins
  IdleReaper(const IdleReaper&) = delete;
  IdleReaper& operator=(const IdleReaper&) = delete;

 private:
  void Loop();
  std::vector<DeviceRuntime*> devices_;
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kjit::launch
