#include <utility>

#include "runtime/driver/cuda_driver.h"
#include "runtime/driver/driver_internal.h"

namespace kjit::driver {

StatusOr<Stream> Stream::Create(unsigned flags) {
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  CUstream s = nullptr;
  KJIT_CU_RETURN_IF_ERROR(api->cuStreamCreate(&s, flags), "cuStreamCreate");
  return Stream(s);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Stream::~Stream() { Reset(); }

void Stream::Reset() {
  if (stream_ == nullptr) return;
  if (const Api* api = LoadedApi()) api->cuStreamDestroy(stream_);
  stream_ = nullptr;
}

Status Stream::Synchronize() const {
  if (stream_ == nullptr) return absl::FailedPreconditionError("Synchronize on a moved-from Stream");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  return Check(api->cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

StatusOr<Event> Event::Create(unsigned flags) {
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  CUevent e = nullptr;
  KJIT_CU_RETURN_IF_ERROR(api->cuEventCreate(&e, flags), "cuEventCreate");
  return Event(e);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Event::~Event() { Reset(); }

void Event::Reset() {
  if (event_ == nullptr) return;
  if (const Api* api = LoadedApi()) api->cuEventDestroy(event_);
  event_ = nullptr;
}

Status Event::Record(CUstream stream) const {
  if (event_ == nullptr) return absl::FailedPreconditionError("Record on a moved-from Event");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  return Check(api->cuEventRecord(event_, stream), "cuEventRecord");
}

Status Event::Synchronize() const {
  if (event_ == nullptr) return absl::FailedPreconditionError("Synchronize on a moved-from Event");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  return Check(api->cuEventSynchronize(event_), "cuEventSynchronize");
}

StatusOr<float> Event::ElapsedMs(const Event& start, const Event& end) {
  if (start.event_ == nullptr || end.event_ == nullptr) {
    return absl::FailedPreconditionError("ElapsedMs on a moved-from Event");
  }
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  float ms = 0;
  KJIT_CU_RETURN_IF_ERROR(api->cuEventElapsedTime(&ms, start.event_, end.event_), "cuEventElapsedTime");
  return ms;
}

}  // namespace kjit::driver
