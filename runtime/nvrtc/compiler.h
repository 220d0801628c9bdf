// One NVRTC program for one arch, straight to cubin (no PTX, so the driver's JIT never runs):
// options normalized, toolkit include path, name expressions, the log kept on success and failure,
// and the ptxas resource report parsed per kernel. Thread-safe: separate programs compile
// concurrently; callers bound their own parallelism (see kernels::KernelCompiler).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/common/kernel_resources.h"
#include "runtime/common/status.h"

namespace kjit::nvrtc {

struct Header {
  std::string name;     // the include name, e.g. "common/bf16.cuh"
  std::string content;
};

struct CompileRequest {
  std::string arch;          // "sm_90", "sm_120", "sm_120a", ...
  std::string program_name;  // shows in the log as the file name of the source
  std::string source;
  std::vector<Header> headers;
  std::vector<std::string> options;  // beyond DefaultOptions()
  std::vector<std::string> name_expressions;
};

struct CompileResult {
  std::vector<char> cubin;
  std::string log;
  std::vector<std::pair<std::string, std::string>> lowered_names;  // name expression -> lowered
  std::vector<KernelResources> resources;  // one per kernel in the report
  double compile_ms = 0;
};

// Compiles to cubin. InvalidArgument for an unknown arch (listing the supported ones) or a source
// that fails (the message carries the log, with file:line); Internal for NVRTC failures.
StatusOr<CompileResult> Compile(const CompileRequest& request);

// The options Compile passes: the project defaults spelled out, the arch, the toolkit include
// path marker, then the request's options; deterministic for a request (part of the cache key).
// The toolkit include directory itself is not included (it is a machine path).
std::vector<std::string> NormalizedOptions(const CompileRequest& request);

// The project defaults (-std=c++17, resource report, ...), without the arch.
const std::vector<std::string>& DefaultOptions();

// Archs this NVRTC compiles to cubin: "sm_75" ... plus arch-specific "a" variants (sm_90a, ...).
const std::vector<std::string>& SupportedArchs();
Status ValidateArch(std::string_view arch);

// NVRTC version and build, e.g. "13.0 (cuda_13.0.r13.0/compiler.xxxxx)"; part of the cache key.
std::string Version();

// $KJIT_CUDA_INCLUDE if set, else the toolkit include directory found beside libnvrtc at run time
// (or the one the build used). Empty when none is found.
std::string CudaIncludeDir();

// Parses ptxas --verbose output (exposed for tests).
std::vector<KernelResources> ParseResourceReport(std::string_view log);

}  // namespace kjit::nvrtc
