// What a family compiles and what a launcher finds: a specialization is one NVRTC program (the
// family's entry source with its name expressions, explicit template instantiations whose lowered
// names NVRTC reports), and a KernelTable maps them to loaded functions. registry.h lists every
// family's specializations (the catalog).
#pragma once

#include <cuda.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"

namespace kjit::kernels {

struct Specialization {
  std::string family;        // "mla_verify", "mla_verify_naive"
  std::string name;          // unique within the family, e.g. "h8_bool"
  std::string entry_source;  // path under kernel_sources/, e.g. "mla_verify/mla_verify.cu"
  std::vector<std::string> name_expressions;  // e.g. "kjit::mla_verify_split<8, false>"
  std::vector<std::string> extra_options;     // NVRTC options beyond the project defaults
  // The most dynamic shared memory (bytes) the family's plan requests when it launches the main
  // kernel, name_expressions[0], on `arch` (e.g. "sm_90"); the other kernels launch without any.
  // Unset means none. The catalog test checks each kernel's static smem (ptxas) plus its dynamic
  // smem against the arch's per-block limit.
  std::function<int(std::string_view arch)> max_dynamic_smem;
  // The arch NVRTC compiles for when the specialization is asked for `arch` (a device's arch or a
  // --arch flag). Unset means `arch` itself. mla_verify maps sm_90 to sm_90a (wgmma).
  std::function<std::string(std::string_view arch)> target_arch;
};

// Loaded kernels of one device: what a launcher needs to find a CUfunction. Implemented by the
// daemon (modules it loaded) and by the in-process client (cubins fetched with GetKernel). Every
// function it returns may already use the device's opt-in dynamic shared memory (LoadedKernels
// sets that at load): launchers do not set it per launch.
class KernelTable {
 public:
  virtual ~KernelTable() = default;
  virtual StatusOr<CUfunction> Function(std::string_view family, std::string_view specialization,
                                        std::string_view name_expression) const = 0;
};

}  // namespace kjit::kernels
