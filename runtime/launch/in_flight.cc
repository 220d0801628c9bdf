#include "runtime/launch/in_flight.h"

#include "runtime/common/log.h"

namespace kjit::launch {

Status InFlightLaunches::Hold(std::vector<std::shared_ptr<const void>> refs, ErrorWatch watch) {
  auto take_event = [this]() -> StatusOr<driver::Event> {
    if (spare_events_.empty()) return driver::Event::Create(CU_EVENT_DISABLE_TIMING);
    driver::Event e = std::move(spare_events_.back());
    spare_events_.pop_back();
    return e;
  };
  auto done = take_event();
  Status s = done.ok() ? done->Record(stream_) : done.status();
  if (!s.ok()) {
    if (watch.word != nullptr) words_->Release(watch.word);
    return s;
  }
  launches_.push_back({*std::move(done), std::move(refs), std::move(watch)});
  return absl::OkStatus();
}

void InFlightLaunches::Reap() {
  auto api = driver::Get();
  if (!api.ok()) return;
  // Events complete in stream order: stop at the first one still pending.
  while (!launches_.empty() && (*api)->cuEventQuery(launches_.front().done.get()) != CUDA_ERROR_NOT_READY) {
    ErrorWatch& w = launches_.front().watch;
    if (w.word != nullptr) {
      if (*static_cast<volatile uint32_t*>(w.word) != 0 && w.report) {
        const auto report = std::make_shared<const std::string>(w.report(*w.word));
        Log(LogLevel::kWarn, *report);
        for (const WatchedEvent& e : w.events) failures_[e.name] = Failure{e.registration, report};
      }
      words_->Release(w.word);
    }
    if (spare_events_.size() < 64) spare_events_.push_back(std::move(launches_.front().done));
    launches_.pop_front();
  }
  std::erase_if(failures_, [](const auto& kv) { return kv.second.registration.expired(); });
}

std::string InFlightLaunches::OldestPendingWait() const {
  auto api = driver::Get();
  if (!api.ok()) return "";
  for (const Launch& l : launches_) {
    if ((*api)->cuEventQuery(l.done.get()) == CUDA_ERROR_NOT_READY) return l.watch.wait_event;
  }
  return "";
}

std::string InFlightLaunches::TakeFailure(const std::string& name, const std::shared_ptr<const void>& registration) {
  auto it = failures_.find(name);
  if (it == failures_.end()) return "";
  if (it->second.registration.lock() != registration) {  // filed under an earlier registration
    failures_.erase(it);
    return "";
  }
  const std::shared_ptr<const std::string> report = it->second.report;
  std::erase_if(failures_, [&](const auto& kv) { return kv.second.report == report; });
  return *report;
}

}  // namespace kjit::launch
