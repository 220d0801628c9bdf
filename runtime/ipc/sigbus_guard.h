// Copies that touch a client's POSIX shared memory mapping. The client can shrink the object at
// any time (ftruncate); touching a mapped page past the object's new end raises SIGBUS, which
// would kill the daemon. These copies catch that fault on the calling thread and return an error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/common/status.h"

namespace kjit::ipc {

// memcpy(dst, src, n) where src or dst may lie in a shared mapping. On SIGBUS: INVALID_ARGUMENT
// saying that `what` is no longer backed by its shared memory object (dst may be partly written).
// A SIGBUS raised anywhere else keeps the process's previous disposition.
Status GuardedCopy(void* dst, const void* src, size_t n, const char* what);

// An acquire load of a 32-bit word of a shared mapping, for polling: no system call unless the
// load faults (then INVALID_ARGUMENT as GuardedCopy).
StatusOr<uint32_t> GuardedLoad32(const uint32_t* word, const char* what);

}  // namespace kjit::ipc
