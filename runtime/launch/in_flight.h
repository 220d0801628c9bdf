// Asynchronous launches of one device after their reply: what each must keep alive (regions,
// events, page-locked staging) until its work has run on the stream, and the error report of each
// that failed, delivered to the next launch that names one of its events. Every call holds the
// device's mutex.
#pragma once

#include <cuda.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/driver/cuda_driver.h"
#include "runtime/launch/error_words.h"

namespace kjit::launch {

class InFlightLaunches {
 public:
  InFlightLaunches(CUstream stream, ErrorWords* words) : stream_(stream), words_(words) {}

  // An event the launch named (name, and the registration, so that a report never reaches a later
  // event registered under the same name).
  struct WatchedEvent {
    std::string name;
    std::weak_ptr<const void> registration;
  };
  // The launch's error word (from ErrorWords::Acquire, released here) and what to file when it is
  // nonzero once the work has run.
  struct ErrorWatch {
    uint32_t* word = nullptr;
    std::vector<WatchedEvent> events;
    std::function<std::string(uint32_t)> report;
    std::string wait_event;  // the launch's kjit_wait_event, "" for none
  };
  // Keeps `refs` alive until the work queued on the stream so far has finished.
  Status Hold(std::vector<std::shared_ptr<const void>> refs, ErrorWatch watch);
  // Drops the finished launches; a nonzero error word is logged (warn) and its report filed under
  // each of the launch's events.
  void Reap();
  // The report filed under the event `name` (registration `registration`) by an earlier launch,
  // removed (under every event it was filed under); empty when none.
  std::string TakeFailure(const std::string& name, const std::shared_ptr<const void>& registration);
  size_t size() const { return launches_.size(); }
  // The kjit_wait_event of the oldest launch whose work has not run: what the stream waits for
  // when it does not drain ("" when no such launch names one).
  std::string OldestPendingWait() const;

 private:
  struct Launch {
    driver::Event done;
    std::vector<std::shared_ptr<const void>> refs;
    ErrorWatch watch;
  };
  struct Failure {
    std::weak_ptr<const void> registration;
    std::shared_ptr<const std::string> report;
  };
  CUstream stream_;
  ErrorWords* words_;
  std::deque<Launch> launches_;
  std::vector<driver::Event> spare_events_;  // completion events of reaped launches, for reuse
  // Event name -> the report of the launch that named it; entries whose registration is gone are
  // dropped by Reap.
  std::map<std::string, Failure> failures_;
};

}  // namespace kjit::launch
