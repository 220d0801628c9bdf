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

// The kernel_sources/ files that `source` includes, directly or through one another, sorted by name:
// what a compile of `source` gets as headers and what its cache key covers. Names resolve the way
// NVRTC resolves them among the headers it is given: exactly, relative to kernel_sources/ (never to
// the including file's folder). A superset of what the preprocessor reads (every #if branch counts);
// every file when some file names an include through a macro.
std::vector<nvrtc::Header> IncludedKernelHeaders(std::string_view source);

// The file names of a text's #include (and #include_next) directives, quoted or in angle brackets,
// in order, with comments skipped and every #if branch counted (exposed for tests).
struct IncludeDirectives {
  std::vector<std::string> names;
  bool computed = false;  // some directive names its file through a macro
};
IncludeDirectives ScanIncludes(std::string_view text);

// Where the sources come from: "embedded" or the override directory.
std::string KernelSourceOrigin();

}  // namespace kjit::kernels
