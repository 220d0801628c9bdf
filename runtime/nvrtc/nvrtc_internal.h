// Shared by the NVRTC translation units (not part of the public API).
#pragma once

#include "runtime/nvrtc/compiler.h"

namespace kjit::nvrtc {

// InvalidArgument for options the request may not carry (arch, include paths).
Status CheckRequestOptions(const CompileRequest& request);

}  // namespace kjit::nvrtc
