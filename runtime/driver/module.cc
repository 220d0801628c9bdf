#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/driver/driver_internal.h"

namespace kjit::driver {

StatusOr<Module> Module::Load(const std::vector<char>& cubin) {
  if (cubin.empty()) return absl::InvalidArgumentError("Module::Load: empty cubin");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  CUmodule m = nullptr;
  KJIT_CU_RETURN_IF_ERROR(api->cuModuleLoadData(&m, cubin.data()),
                          absl::StrCat("cuModuleLoadData(", cubin.size(), "-byte cubin)"));
  return Module(m);
}

Module::Module(Module&& other) noexcept : module_(std::exchange(other.module_, nullptr)) {}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    Reset();
    module_ = std::exchange(other.module_, nullptr);
  }
  return *this;
}

Module::~Module() { Reset(); }

void Module::Reset() {
  if (module_ == nullptr) return;
  if (const Api* api = LoadedApi()) api->cuModuleUnload(module_);
  module_ = nullptr;
}

StatusOr<CUfunction> Module::Function(const std::string& lowered_name) const {
  if (module_ == nullptr) return absl::FailedPreconditionError("Function on a moved-from Module");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  CUfunction f = nullptr;
  KJIT_CU_RETURN_IF_ERROR(api->cuModuleGetFunction(&f, module_, lowered_name.c_str()),
                          absl::StrCat("cuModuleGetFunction(", lowered_name, ")"));
  return f;
}

}  // namespace kjit::driver
