#include "bench/kernel_bench/ceilings.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kjit::bench {

kernels::Specialization MmaPeakSpecialization() {
  kernels::Specialization s;
  s.family = "bench";
  s.name = "mma_peak";
  s.entry_source = "bench/mma_peak.cu";
  s.name_expressions = {"kjit::bench::MmaPeak", "kjit::bench::ClockProbe"};
  return s;
}

StatusOr<Ceilings> MeasureCeilings(const kernels::KernelTable& kernels, const driver::DeviceInfo& dev,
                                   CUstream stream) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  Ceilings c;
  {
    constexpr size_t kBytes = size_t{1} << 30;
    KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer src, driver::DeviceBuffer::Alloc(kBytes));
    KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer dst, driver::DeviceBuffer::Alloc(kBytes));
    KJIT_RETURN_IF_ERROR(src.Fill(0x5a));
    auto copy = [&](int) {
      return driver::Check(api->cuMemcpyDtoDAsync(dst.get(), src.get(), kBytes, stream), "copy ceiling");
    };
    KJIT_RETURN_IF_ERROR(MedianMs(stream, 3, copy).status());  // warm-up
    KJIT_ASSIGN_OR_RETURN(double ms, MedianMs(stream, 20, copy));
    c.copy_bytes_per_s = 2.0 * kBytes / (ms * 1e-3);
  }
  {
    KJIT_ASSIGN_OR_RETURN(CUfunction f, kernels.Function("bench", "mma_peak", "kjit::bench::MmaPeak"));
    KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer sink, driver::DeviceBuffer::Alloc(256));
    int iters = 4096;
    CUdeviceptr out = sink.get();
    void* args[] = {&iters, &out};
    const unsigned blocks = static_cast<unsigned>(dev.sm_count) * 8;
    auto launch = [&](int) {
      return driver::Check(api->cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr),
                           "mma peak launch");
    };
    KJIT_RETURN_IF_ERROR(MedianMs(stream, 3, launch).status());
    KJIT_ASSIGN_OR_RETURN(double ms, MedianMs(stream, 10, launch));
    const double flops = double(blocks) * 8 /*warps*/ * iters * 8 /*chains*/ * 2.0 * 16 * 8 * 16;
    c.mma_flops_per_s = flops / (ms * 1e-3);
  }
  return c;
}

StatusOr<double> MeasureSmClockHz(const kernels::KernelTable& kernels, const driver::DeviceInfo& dev, CUstream stream) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_ASSIGN_OR_RETURN(CUfunction f, kernels.Function("bench", "mma_peak", "kjit::bench::ClockProbe"));
  const unsigned ctas = static_cast<unsigned>(std::max(1, dev.sm_count));
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer buf, driver::DeviceBuffer::Alloc(ctas * 16));
  unsigned long long spin_ns = 200000;
  CUdeviceptr out = buf.get();
  void* args[] = {&spin_ns, &out};
  KJIT_RETURN_IF_ERROR(
      driver::Check(api->cuLaunchKernel(f, ctas, 1, 1, 32, 1, 1, 0, stream, args, nullptr), "clock probe launch"));
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(stream), "clock probe"));
  std::vector<unsigned long long> v(2 * ctas);
  KJIT_RETURN_IF_ERROR(buf.CopyToHost(v.data(), v.size() * 8, 0));
  std::vector<double> hz;
  for (unsigned i = 0; i < ctas; ++i)
    if (v[2 * i + 1] > 0) hz.push_back(static_cast<double>(v[2 * i]) / static_cast<double>(v[2 * i + 1]) * 1e9);
  if (hz.empty()) return absl::InternalError("clock probe recorded nothing");
  std::nth_element(hz.begin(), hz.begin() + hz.size() / 2, hz.end());
  return hz[hz.size() / 2];
}

StatusOr<std::function<Status(int)>> EmptyCallLauncher(const kernels::KernelTable& kernels, CUstream stream,
                                                       int count) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_ASSIGN_OR_RETURN(CUfunction f, kernels.Function("bench", "mma_peak", "kjit::bench::ClockProbe"));
  // ClockProbe with no time to spin: one read of each clock and two stores.
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer buf, driver::DeviceBuffer::Alloc(16));
  auto out = std::make_shared<driver::DeviceBuffer>(std::move(buf));
  return std::function<Status(int)>([api, f, stream, out, count](int) -> Status {
    unsigned long long spin_ns = 0;
    CUdeviceptr dst = out->get();
    void* args[] = {&spin_ns, &dst};
    for (int k = 0; k < count; ++k) {
      KJIT_RETURN_IF_ERROR(driver::Check(api->cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, args, nullptr),
                                         "empty kernel launch"));
    }
    return absl::OkStatus();
  });
}

}  // namespace kjit::bench
