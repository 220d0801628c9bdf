#include <charconv>

#include "absl/strings/str_cat.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::kernels {
namespace {

std::string FunctionKey(std::string_view family, std::string_view spec, std::string_view expr) {
  return absl::StrCat(absl::string_view(family.data(), family.size()), "/",
                      absl::string_view(spec.data(), spec.size()), "/",
                      absl::string_view(expr.data(), expr.size()));
}

// Lets `fn` use all the dynamic shared memory the device allows a block (beyond the 48 KB default):
// set once at load rather than before every launch; each plan decides how much it takes.
Status AllowAllDynamicSmem(CUfunction fn, int optin_bytes) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  int static_bytes = 0;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuFuncGetAttribute(&static_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
                                     "static shared memory"));
  return driver::Check(
      api->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin_bytes - static_bytes),
      "raise the dynamic shared memory limit");
}

}  // namespace

std::pair<int, char> ParseArch(std::string_view arch) {
  if (arch.substr(0, 3) != "sm_") return {0, 0};
  std::string_view digits = arch.substr(3);
  char suffix = 0;
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
    suffix = digits.back();
    digits.remove_suffix(1);
  }
  int n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return {0, 0};
  return {n, suffix};
}

bool ArchRunsOn(std::string_view arch, std::string_view device_arch) {
  auto [n, suffix] = ParseArch(arch);
  auto [d, device_suffix] = ParseArch(device_arch);
  if (n == 0 || d == 0 || device_suffix != 0) return false;
  if (suffix == 'a') return n == d;  // arch-specific features: that arch only
  // Plain and family-specific cubins run on later minor versions of the same major arch.
  return n / 10 == d / 10 && d >= n;
}

StatusOr<std::unique_ptr<LoadedKernels>> LoadedKernels::Load(const std::vector<CompiledKernel>& kernels,
                                                              const driver::DeviceInfo& device) {
  std::unique_ptr<LoadedKernels> out(new LoadedKernels());
  for (const CompiledKernel& k : kernels) {
    const std::string what = absl::StrCat(k.spec.family, "/", k.spec.name, " (", k.cubin_arch,
                                          ") on device ", device.ordinal, " (", device.arch, ")");
    if (!ArchRunsOn(k.cubin_arch, device.arch)) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": a cubin for ", k.cubin_arch,
                                                        " cannot run on ", device.arch));
    }
    if (k.lowered_names.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": no kernels (name expressions)"));
    }
    auto module = driver::Module::Load(k.cubin);
    if (!module.ok()) return WithContext(module.status(), what);
    // Resolve every kernel now: with lazy loading a wrong cubin would otherwise fail at first launch.
    for (const auto& [expr, lowered] : k.lowered_names) {
      auto fn = module->Function(lowered);
      if (!fn.ok()) return WithContext(fn.status(), absl::StrCat(what, ": ", expr));
      if (Status s = AllowAllDynamicSmem(*fn, device.max_smem_per_block_optin); !s.ok())
        return WithContext(s, absl::StrCat(what, ": ", expr));
      auto [it, inserted] = out->functions_.emplace(Key{k.spec.family, k.spec.name, expr}, *fn);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", expr, " loaded twice"));
      }
    }
    out->modules_.push_back(std::move(*module));
  }
  return out;
}

StatusOr<CUfunction> LoadedKernels::Function(std::string_view family, std::string_view specialization,
                                             std::string_view name_expression) const {
  auto it = functions_.find(KeyView{family, specialization, name_expression});
  if (it == functions_.end()) {
    return absl::NotFoundError(absl::StrCat("kernel ", FunctionKey(family, specialization, name_expression),
                                            " is not loaded on this device"));
  }
  return it->second;
}

}  // namespace kjit::kernels
