// Event timing helper (template body of MedianMs).
#pragma once

#include <algorithm>
#include <vector>

#include "runtime/driver/cuda_driver.h"

namespace kjit::bench {

template <typename F>
StatusOr<double> MedianMs(CUstream stream, int reps, F&& enqueue) {
  std::vector<driver::Event> starts, ends;
  for (int i = 0; i < reps; ++i) {
    KJIT_ASSIGN_OR_RETURN(driver::Event a, driver::Event::Create());
    KJIT_ASSIGN_OR_RETURN(driver::Event b, driver::Event::Create());
    starts.push_back(std::move(a));
    ends.push_back(std::move(b));
  }
  for (int i = 0; i < reps; ++i) {
    KJIT_RETURN_IF_ERROR(starts[i].Record(stream));
    KJIT_RETURN_IF_ERROR(enqueue(i));
    KJIT_RETURN_IF_ERROR(ends[i].Record(stream));
  }
  KJIT_RETURN_IF_ERROR(ends.back().Synchronize());
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    KJIT_ASSIGN_OR_RETURN(float t, driver::Event::ElapsedMs(starts[i], ends[i]));
    ms.push_back(t);
  }
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[reps / 2];
}

}  // namespace kjit::bench
