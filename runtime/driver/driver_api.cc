#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <type_traits>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/driver/driver_internal.h"

namespace kjit::driver {
namespace {

// The signature the header declares is the one of the ABI version the loader asks for.
#define KJIT_CU_CHECK_ABI(name, version)                                              \
  static_assert(std::is_same_v<decltype(Api::name), PFN_##name##_v##version>, \
                #name " is requested at an ABI version whose signature differs");
KJIT_CU_API_LIST(KJIT_CU_CHECK_ABI)
#undef KJIT_CU_CHECK_ABI

// Names of the errors this project meets, for messages when the driver cannot be asked.
const char* FallbackErrorName(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    default: return nullptr;
  }
}

absl::StatusCode CodeFor(CUresult r) {
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_IMAGE: return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_NOT_INITIALIZED: return absl::StatusCode::kFailedPrecondition;
    case CUDA_ERROR_NOT_FOUND: return absl::StatusCode::kNotFound;
    case CUDA_ERROR_NOT_READY: return absl::StatusCode::kUnavailable;
    default: return absl::StatusCode::kInternal;
  }
}

struct Loaded {
  Api api;
  Status status;
};

// Resolves every entry through cuGetProcAddress at the API version <cuda.h> declares.
Status Resolve(void* handle, Api& api) {
  using GetProcAddress = decltype(&::cuGetProcAddress);  // cuGetProcAddress_v2
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    return absl::FailedPreconditionError(
        "compile-only: the CUDA driver lacks cuGetProcAddress_v2 (driver older than CUDA 12)");
  }
  Status status;
  auto load = [&](const char* name, int version, auto& slot) {
    if (!status.ok()) return;
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = get_proc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (r != CUDA_SUCCESS || fn == nullptr || found != CU_GET_PROC_ADDRESS_SUCCESS) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "compile-only: the CUDA driver lacks ", name, " (ABI version ", version, "; result ",
          static_cast<int>(r), ", query ", static_cast<int>(found), "); update the driver"));
      return;
    }
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(fn);
  };
  // #name stringizes the unexpanded API name (cuMemAlloc), which cuGetProcAddress expects.
#define KJIT_CU_RESOLVE(name, version) load(#name, version, api.name);
  KJIT_CU_API_LIST(KJIT_CU_RESOLVE)
#undef KJIT_CU_RESOLVE
  return status;
}

Loaded* LoadOnce() {
  static Loaded* loaded = [] {
    auto* l = new Loaded();
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* err = dlerror();
      l->status = absl::FailedPreconditionError(
          absl::StrCat("compile-only: no CUDA driver (", err ? err : "dlopen failed", ")"));
      return l;
    }
    // The handle stays open for the process lifetime: function pointers point into it.
    l->status = Resolve(handle, l->api);
    if (!l->status.ok()) return l;
    CUresult r = l->api.cuInit(0);
    if (r != CUDA_SUCCESS) {
      l->status = absl::FailedPreconditionError(absl::StrCat(
          "compile-only: no usable CUDA device (", ErrorText(&l->api, r, "cuInit"), ")"));
    }
    return l;
  }();
  return loaded;
}

}  // namespace

std::string ErrorText(const Api* api, CUresult r, std::string_view what) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api != nullptr && api->cuGetErrorName != nullptr) api->cuGetErrorName(r, &name);
  if (api != nullptr && api->cuGetErrorString != nullptr) api->cuGetErrorString(r, &text);
  if (name == nullptr) name = FallbackErrorName(r);
  std::string out = std::string(what) + ": ";
  if (name != nullptr) {
    absl::StrAppend(&out, name);
  } else {
    absl::StrAppend(&out, "CUDA error ", static_cast<int>(r));
  }
  if (text != nullptr) absl::StrAppend(&out, " (", text, ")");
  return out;
}

StatusOr<const Api*> Get() {
  Loaded* l = LoadOnce();
  if (!l->status.ok()) return l->status;
  return &l->api;
}

const Api* LoadedApi() {
  Loaded* l = LoadOnce();
  return l->status.ok() ? &l->api : nullptr;
}

Status Check(CUresult r, std::string_view what) {
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  return Status(CodeFor(r), ErrorText(LoadedApi(), r, what));
}

}  // namespace kjit::driver
