// Where the toolkit headers are and which NVRTC build this is (both feed the cache key or the
// include path; neither may be guessed from the build machine alone).
#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::nvrtc {
namespace {

namespace fs = std::filesystem;

bool HasToolkitHeaders(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "cuda_bf16.h", ec) && fs::exists(dir / "cuda_fp16.h", ec);
}

// The "Compiler Build ID" and "Cuda compilation tools" lines NVRTC writes into PTX headers.
std::string BuildIdentity() {
  nvrtcProgram prog = nullptr;
  if (nvrtcCreateProgram(&prog, "__global__ void kjit_version_probe() {}", "version_probe.cu", 0,
                         nullptr, nullptr) != NVRTC_SUCCESS) {
    return "unknown-build";
  }
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> owner(&prog, [](nvrtcProgram* p) {
    nvrtcDestroyProgram(p);
  });
  const char* opts[] = {"--gpu-architecture=compute_75"};
  size_t n = 0;
  if (nvrtcCompileProgram(prog, 1, opts) != NVRTC_SUCCESS || nvrtcGetPTXSize(prog, &n) != NVRTC_SUCCESS) {
    return "unknown-build";
  }
  std::string ptx(n, '\0');
  if (nvrtcGetPTX(prog, ptx.data()) != NVRTC_SUCCESS) return "unknown-build";
  std::string id;
  for (const char* marker : {"Compiler Build ID: ", "Cuda compilation tools, "}) {
    size_t at = ptx.find(marker);
    if (at == std::string::npos) continue;
    size_t end = ptx.find('\n', at);
    if (!id.empty()) id += ", ";
    id += ptx.substr(at + std::string(marker).size(), end - at - std::string(marker).size());
  }
  return id.empty() ? "unknown-build" : id;
}

}  // namespace

std::string Version() {
  static const std::string version = [] {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return std::string("unknown");
    return absl::StrCat(major, ".", minor, " (", BuildIdentity(), ")");
  }();
  return version;
}

std::string CudaIncludeDir() {
  if (const char* env = std::getenv("KJIT_CUDA_INCLUDE"); env != nullptr && *env != '\0') return env;
  static const std::string found = [] {
    // Beside the libnvrtc actually loaded: <root>/lib64 or <root>/targets/<triple>/lib.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) != 0 && info.dli_fname != nullptr) {
      std::error_code ec;
      fs::path lib = fs::canonical(info.dli_fname, ec).parent_path();
      if (!ec) {
        for (const fs::path& c : {lib / ".." / "include", lib / ".." / ".." / "include",
                                  lib / ".." / ".." / ".." / "include"}) {
          if (HasToolkitHeaders(c)) return fs::weakly_canonical(c, ec).string();
        }
      }
    }
    for (const char* c : {KJIT_BUILD_CUDA_INCLUDE, "/usr/local/cuda/include"}) {
      if (HasToolkitHeaders(c)) return std::string(c);
    }
    return std::string();
  }();
  return found;
}

}  // namespace kjit::nvrtc
