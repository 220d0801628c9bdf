// The device sources under kernel_sources/, embedded into the binary at build time (a generated .cc
// in the build tree). $KJIT_KERNEL_DIR, when set, replaces the embedded set at run time so kernels
// can be edited without a rebuild; the cache key covers content, so edits never hit stale entries.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::kernels {

// One file by its path relative to kernel_sources/ ("mla_verify/mla_verify.cu").
// NotFound when absent; InvalidArgument for absolute paths or "..".
StatusOr<std::string> KernelSource(std::string_view relative_path);

// Every file under kernel_sources/ (embedded, or $KJIT_KERNEL_DIR), name = relative path, sorted by
// name. Device headers are .cuh/.h; build files are excluded.
std::vector<nvrtc::Header> AllKernelHeaders();

// Where the sources come from: "embedded" or the override directory.
std::string KernelSourceOrigin();

}  // namespace kjit::kernels
