// The table the build generates from kernel_sources/ (kernel_sources/CMakeLists.txt): read through
// kernel_sources.h, which also applies the $KJIT_KERNEL_DIR override.
#pragma once

#include <cstddef>

namespace kjit::kernels::embedded {

struct File {
  const char* path;  // relative to kernel_sources/, '/'-separated
  const char* data;  // size bytes, then a terminating NUL
  size_t size;
};

extern const File kFiles[];  // sorted by path; kNumFiles entries then a null sentinel
extern const size_t kNumFiles;

}  // namespace kjit::kernels::embedded
