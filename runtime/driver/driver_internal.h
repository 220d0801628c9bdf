// Helpers shared by the driver's translation units (not part of the public API).
#pragma once

#include <string>
#include <string_view>

#include "runtime/driver/cuda_driver.h"

namespace kjit::driver {

// "what: CUDA_ERROR_X (description)"; api may be null (names from a built-in table).
std::string ErrorText(const Api* api, CUresult r, std::string_view what);

// The loaded API, or null when Get() failed. For destructors, which run only on handles that a
// successful Get() created.
const Api* LoadedApi();

}  // namespace kjit::driver

// Evaluates a driver call through the loaded table `api` and returns its Status on failure.
#define KJIT_CU_RETURN_IF_ERROR(call, what) KJIT_RETURN_IF_ERROR(::kjit::driver::Check((call), (what)))
