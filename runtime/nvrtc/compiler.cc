#include <nvrtc.h>

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/nvrtc/compiler.h"
#include "runtime/nvrtc/nvrtc_internal.h"

namespace kjit::nvrtc {
namespace {

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

Status NvrtcError(nvrtcResult r, std::string_view what, const CompileRequest& req) {
  return absl::InternalError(absl::StrCat(std::string(what), " (", req.program_name, ", ", req.arch,
                                          "): ", nvrtcGetErrorString(r)));
}

std::string ProgramLog(nvrtcProgram prog) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0) return {};
  std::string log(n, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// NVRTC writes "name(line): error: ..."; the message leads with "name:line: " so editors and
// people find the place at once, followed by the whole log.
std::string FirstErrorLocation(const std::string& log) {
  for (size_t at = log.find("): "); at != std::string::npos; at = log.find("): ", at + 1)) {
    std::string_view after = std::string_view(log).substr(at + 3);
    if (after.substr(0, 6) != "error:" && after.substr(0, 12) != "catastrophic") continue;
    size_t open = log.rfind('(', at);
    if (open == std::string::npos || open + 1 >= at) continue;
    std::string_view line = std::string_view(log).substr(open + 1, at - open - 1);
    if (line.find_first_not_of("0123456789") != std::string_view::npos) continue;
    size_t begin = log.find_last_of(" \n", open);
    begin = begin == std::string::npos ? 0 : begin + 1;
    if (begin == open) continue;
    return absl::StrCat(log.substr(begin, open - begin), ":", std::string(line));
  }
  return {};
}

}  // namespace

StatusOr<CompileResult> Compile(const CompileRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  KJIT_RETURN_IF_ERROR(ValidateArch(req.arch));
  KJIT_RETURN_IF_ERROR(CheckRequestOptions(req));
  std::vector<const char*> header_sources, header_names;
  for (const Header& h : req.headers) {
    header_sources.push_back(h.content.c_str());
    header_names.push_back(h.name.c_str());
  }
  nvrtcProgram raw = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&raw, req.source.c_str(), req.program_name.c_str(),
                                     static_cast<int>(req.headers.size()), header_sources.data(),
                                     header_names.data());
  if (r != NVRTC_SUCCESS) return NvrtcError(r, "nvrtcCreateProgram", req);
  Program prog(raw);
  for (const std::string& expr : req.name_expressions) {
    r = nvrtcAddNameExpression(prog.get(), expr.c_str());
    if (r != NVRTC_SUCCESS) return NvrtcError(r, absl::StrCat("nvrtcAddNameExpression(", expr, ")"), req);
  }
  std::vector<std::string> options = NormalizedOptions(req);
  const std::string include_dir = CudaIncludeDir();
  if (include_dir.empty()) {
    return absl::FailedPreconditionError(
        "CUDA toolkit headers not found (cuda_bf16.h); set KJIT_CUDA_INCLUDE to the toolkit's include directory");
  }
  options.push_back(absl::StrCat("--include-path=", include_dir));
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());

  r = nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  CompileResult result;
  result.log = ProgramLog(prog.get());
  if (r == NVRTC_ERROR_COMPILATION || r == NVRTC_ERROR_INVALID_OPTION) {
    std::string where = FirstErrorLocation(result.log);
    return absl::InvalidArgumentError(absl::StrCat(
        where.empty() ? "" : where + ": ", "compiling ", req.program_name, " for ", req.arch,
        " failed (", nvrtcGetErrorString(r), "):\n", result.log));
  }
  if (r != NVRTC_SUCCESS) {
    return WithContext(NvrtcError(r, "nvrtcCompileProgram", req), result.log);
  }
  for (const std::string& expr : req.name_expressions) {
    const char* lowered = nullptr;
    r = nvrtcGetLoweredName(prog.get(), expr.c_str(), &lowered);
    if (r != NVRTC_SUCCESS || lowered == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("name expression '", expr, "' in ",
                                                     req.program_name, " did not resolve: ",
                                                     nvrtcGetErrorString(r)));
    }
    result.lowered_names.emplace_back(expr, lowered);
  }
  size_t size = 0;
  r = nvrtcGetCUBINSize(prog.get(), &size);
  if (r != NVRTC_SUCCESS) return NvrtcError(r, "nvrtcGetCUBINSize", req);
  if (size == 0) return absl::InternalError(absl::StrCat(req.program_name, ": NVRTC produced no cubin"));
  result.cubin.resize(size);
  r = nvrtcGetCUBIN(prog.get(), result.cubin.data());
  if (r != NVRTC_SUCCESS) return NvrtcError(r, "nvrtcGetCUBIN", req);
  result.resources = ParseResourceReport(result.log);
  result.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace kjit::nvrtc
