// The oracle family mla_verify_naive: plan and launch of the slow, obviously-correct kernel in
// kernel_sources/mla_verify_naive/. Same API shape as the fast family, so tests (and the daemon,
// for a "mla_verify_naive" model) drive both the same way.
#pragma once

#include <cuda.h>

#include <string_view>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/catalog.h"
#include "runtime/kernels/mla_verify/args.h"

namespace kjit::kernels {

inline constexpr std::string_view kMlaVerifyNaiveFamily = "mla_verify_naive";
inline constexpr std::string_view kMlaVerifyNaiveSource = "mla_verify_naive/mla_verify_naive.cu";

// The specialization and the kernel's name expression for a mask kind.
std::string_view MlaVerifyNaiveSpecialization(MaskKind mask);
std::string_view MlaVerifyNaiveNameExpression(MaskKind mask);

// InvalidArgument for sizes the kernel cannot take (H < 1 or > 65535, N > 2^31 - 1, negative sizes).
Status CheckMlaVerifyNaiveLimits(const MlaVerifyProblem& problem);

// Grid (N, H), 128 threads, no dynamic shared memory; workspace = the error word only. Checks the
// limits above first.
StatusOr<MlaVerifyPlan> PlanMlaVerifyNaive(const MlaVerifyProblem& problem, const driver::DeviceInfo& device);

// Zeroes the error word in-stream, then launches (nothing else when N == 0). No allocation and no
// synchronization, so a CUDA graph can capture it. InvalidArgument when the plan is another family's
// or another mask kind's, or a required buffer is 0.
Status LaunchMlaVerifyNaive(const KernelTable& kernels, const MlaVerifyPlan& plan,
                            const MlaVerifyProblem& problem, const MlaVerifyBuffers& buffers, CUstream stream);

}  // namespace kjit::kernels
