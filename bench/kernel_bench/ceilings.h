// The two roofline ceilings, measured in the same run as the kernel: device-to-device copy
// bandwidth (bytes read + written per second) and the register-only mma.sync.m16n8k16 bf16 rate.
#pragma once

#include <functional>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/catalog.h"

namespace kjit::bench {

struct Ceilings {
  double copy_bytes_per_s = 0;
  double mma_flops_per_s = 0;
};

// The catalog-style specialization of kernel_sources/bench/mma_peak.cu.
kernels::Specialization MmaPeakSpecialization();

StatusOr<Ceilings> MeasureCeilings(const kernels::KernelTable& kernels, const driver::DeviceInfo& dev,
                                   CUstream stream);

// The SM clock (Hz) now: the median over one CTA per SM of clock64 cycles per %globaltimer ns,
// counted over 200 us.
StatusOr<double> MeasureSmClockHz(const kernels::KernelTable& kernels, const driver::DeviceInfo& dev, CUstream stream);

// The launch part of a call's cost: `launch(i)` enqueues `count` kernels of one CTA that do no work
// (two in place of the split kernel and the combine; kernel_bench times it as it times every row).
StatusOr<std::function<Status(int)>> EmptyCallLauncher(const kernels::KernelTable& kernels, CUstream stream, int count);

// Median of `reps` timings (ms) of `enqueue` on `stream`, each between its own pair of events.
template <typename F>
StatusOr<double> MedianMs(CUstream stream, int reps, F&& enqueue);

}  // namespace kjit::bench

#include "bench/kernel_bench/timing_inl.h"
