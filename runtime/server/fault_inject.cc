#include "runtime/server/fault_inject.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/log.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::server {
namespace {

// A store through a pointer in the first page, which nothing maps (vm.mmap_min_addr), so the GPU
// faults whether or not it can reach host memory.
constexpr char kSource[] = R"(extern "C" __global__ void kjit_fault_inject(unsigned long long address) {
  *reinterpret_cast<volatile int*>(address) = 1;
}
)";
constexpr unsigned long long kInvalidAddress = 0x10;

}  // namespace

bool IsFaultInjection(const Daemon& d, const inference::ModelInferRequest& req) {
  return d.flags.enable_fault_injection && req.model_name() == kFaultInjectModel;
}

Status InjectFault(Daemon* d, const inference::ModelInferRequest& req) {
  int64_t ordinal = 0;
  if (auto it = req.parameters().find("kjit_device"); it != req.parameters().end()) ordinal = it->second.int64_param();
  StatusOr<launch::DeviceRuntime*> device = d->Device(ordinal);
  // Compiled once per arch (compile-only, for sm_90, so that CPU tests see it build); later calls
  // reuse the cubin instead of running NVRTC on this completion-queue thread again.
  const std::string arch = device.ok() ? (*device)->info().arch : "sm_90";
  static std::mutex compiled_mu;
  static std::map<std::string, std::vector<char>> compiled_cubins;
  std::vector<char> cubin;
  {
    std::lock_guard<std::mutex> lock(compiled_mu);
    if (auto it = compiled_cubins.find(arch); it != compiled_cubins.end()) {
      cubin = it->second;
    } else {
      nvrtc::CompileRequest c;
      c.arch = arch;
      c.program_name = "kjit_fault_inject.cu";
      c.source = kSource;
      KJIT_ASSIGN_OR_RETURN(nvrtc::CompileResult compiled, nvrtc::Compile(c));
      cubin = compiled_cubins[arch] = compiled.cubin;
    }
  }
  KJIT_ASSIGN_OR_RETURN(launch::DeviceRuntime * dev, std::move(device));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  Log(LogLevel::kWarn, absl::StrCat(kFaultInjectModel, ": writing to an invalid address on GPU ", ordinal,
                                    " on purpose (--enable-fault-injection)"));
  Status st;
  {
    std::lock_guard<std::mutex> lock(dev->mu());
    KJIT_RETURN_IF_ERROR(dev->context().MakeCurrent());
    KJIT_ASSIGN_OR_RETURN(driver::Module module, driver::Module::Load(cubin));
    KJIT_ASSIGN_OR_RETURN(CUfunction f, module.Function(kFaultInjectModel));
    unsigned long long address = kInvalidAddress;
    void* args[] = {&address};
    st = driver::Check(api->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, dev->stream(), args, nullptr),
                       "cuLaunchKernel(kjit_fault_inject)");
    if (st.ok()) st = driver::Check(api->cuStreamSynchronize(dev->stream()), "cuStreamSynchronize(kjit_fault_inject)");
  }
  if (st.ok()) return absl::InternalError("kjit_fault_inject: the faulting store did not fault");
  return d->launcher.AfterDeviceError(dev, st);
}

}  // namespace kjit::server
