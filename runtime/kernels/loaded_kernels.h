// LoadedKernels is declared with the compiler it consumes; this header exists for includers that
// name the concern directly.
#pragma once

#include "runtime/kernels/kernel_compiler.h"
