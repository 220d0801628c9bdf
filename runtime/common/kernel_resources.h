// ptxas's resource report for one kernel of a compiled program. NVRTC parses it, the cubin cache
// stores it with the entry, kernels hand it on, and the daemon and the kjit tool show it: one struct,
// so no layer copies it field by field into its own.
#pragma once

#include <string>

namespace kjit {

struct KernelResources {
  std::string lowered_name;  // the kernel's symbol, as nvrtcGetLoweredName gives it
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int shared_bytes = 0;  // static shared memory
  int stack_bytes = 0;
  // cmem[0] (kernel parameters and constants). Cache entries do not store it (their format has no
  // field for it that readers of the format accept), so it is 0 for a kernel served through a cache.
  int const_bytes = 0;
};

}  // namespace kjit
