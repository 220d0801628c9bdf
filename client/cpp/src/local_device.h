// A GPU of this process by its CUDA ordinal (CUDA_VISIBLE_DEVICES numbering), for the launchers.
#pragma once

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "runtime/driver/cuda_driver.h"

namespace kjit::client {

// INVALID_ARGUMENT for an ordinal this process does not see; the driver's error without one.
inline StatusOr<driver::DeviceInfo> LocalDevice(int64_t ordinal) {
  KJIT_ASSIGN_OR_RETURN(std::vector<driver::DeviceInfo> all, driver::Devices());
  if (ordinal < 0 || ordinal >= static_cast<int64_t>(all.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", ordinal, " out of range (this process sees ", all.size(), " GPUs)"));
  }
  return all[ordinal];
}

}  // namespace kjit::client
