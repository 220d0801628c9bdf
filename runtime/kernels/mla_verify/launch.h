// Launch of the fast MLA tree-verify family on a stream.
#pragma once

#include <cuda.h>

#include <string_view>

#include "runtime/common/status.h"
#include "runtime/kernels/catalog.h"
#include "runtime/kernels/mla_verify/args.h"
#include "runtime/kernels/mla_verify/plan.h"

namespace kjit::kernels {

// Enqueues the whole sequence on `stream`: the split kernel (prefix chunks and the draft-tree part;
// each CTA writes its error slot; on sm_90+ a programmatic dependent launch whose CTAs wait for the
// kernel before it in the stream, plan.main.programmatic_dependent), the combine (on sm_90+ a
// programmatic dependent launch too: its launch overlaps the split kernel's tail; it also writes the
// error word from the slots). With no query rows, only an in-stream zeroing of the error word. No
// allocation, no synchronization, no host reads of device data: CUDA-graph capturable. InvalidArgument when the plan is not this family's or not this
// problem's, a required buffer is 0 or misaligned (q, k_extend, kv_cache 16 bytes; o 8; workspace
// 256). Errors the kernels detect land in the error word (plan.error_word_offset).
Status LaunchMlaVerify(const KernelTable& kernels, const MlaVerifyPlan& plan, const MlaVerifyProblem& p,
                       const MlaVerifyBuffers& b, CUstream stream);

// A device pointer a kernel dereferences: INVALID_ARGUMENT "<family> launch: <name> is null" or
// "... must be <align>-byte aligned" (a misaligned access is a sticky CUDA error that poisons the
// context of every client on the GPU, so it is refused before any launch).
Status CheckLaunchPointer(std::string_view family, CUdeviceptr ptr, const char* name, unsigned align);

}  // namespace kjit::kernels
