// Arch validation and option normalization: the options are part of the cache key, so every
// default is spelled out (a toolkit changing a default cannot silently reuse old cubins).
#include <nvrtc.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/common/client_text.h"
#include "runtime/nvrtc/compiler.h"
#include "runtime/nvrtc/nvrtc_internal.h"

namespace kjit::nvrtc {
namespace {

// "--ftz=false" -> "--ftz"; options without a value are their own flag.
std::string_view FlagOf(std::string_view option) {
  size_t eq = option.find('=');
  return eq == std::string_view::npos ? option : option.substr(0, eq);
}

}  // namespace

const std::vector<std::string>& DefaultOptions() {
  static const std::vector<std::string> defaults = {
      "-std=c++17",     "--dopt=on",         "--fmad=true",
      "--ftz=false",    "--prec-div=true",   "--prec-sqrt=true",
      "--ptxas-options=--verbose",  // resource report in the log; does not change the cubin
      // Internal-linkage symbols get a random suffix per compile unless seeded; every program is
      // its own module (nothing links them together), so one fixed seed keeps cubins byte-identical.
      "-frandom-seed=0",
      // With a driver present NVRTC 13 keeps its own cache in the driver's compute cache and, on a
      // hit, returns the cubin with an empty log (no resource report). kjit's cache is the one.
      "--no-cache",
  };
  return defaults;
}

const std::vector<std::string>& SupportedArchs() {
  static const std::vector<std::string> archs = [] {
    std::vector<std::string> out;
    int n = 0;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return out;
    std::vector<int> numbers(n);
    if (nvrtcGetSupportedArchs(numbers.data()) != NVRTC_SUCCESS) return out;
    for (int a : numbers) {
      out.push_back(absl::StrCat("sm_", a));
      // NVRTC reports numbers only; arch-specific (a) variants exist from sm_90, family-specific
      // (f) variants from sm_100 (CUDA 12.9+).
      if (a >= 90) out.push_back(absl::StrCat("sm_", a, "a"));
      if (a >= 100) out.push_back(absl::StrCat("sm_", a, "f"));
    }
    return out;
  }();
  return archs;
}

Status ValidateArch(std::string_view arch) {
  const auto& archs = SupportedArchs();
  if (std::find(archs.begin(), archs.end(), arch) != archs.end()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unsupported arch '", ClientText(arch), "'; NVRTC ",
                                                 Version(), " supports: ", absl::StrJoin(archs, " ")));
}

std::vector<std::string> NormalizedOptions(const CompileRequest& request) {
  std::vector<std::string> out = {absl::StrCat("--gpu-architecture=", request.arch)};
  // A request option naming the same flag as a default replaces the default (no conflicting pairs).
  for (const std::string& d : DefaultOptions()) {
    bool overridden = std::any_of(request.options.begin(), request.options.end(),
                                  [&](const std::string& o) { return FlagOf(o) == FlagOf(d); });
    if (!overridden) out.push_back(d);
  }
  // Request options in their order (later -D may override earlier ones), exact repeats dropped.
  for (const std::string& o : request.options) {
    if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
  }
  return out;
}

Status CheckRequestOptions(const CompileRequest& request) {
  for (const std::string& o : request.options) {
    std::string_view f = FlagOf(o);
    if (f == "--gpu-architecture" || f == "-arch" || absl::StartsWith(o, "-arch")) {
      return absl::InvalidArgumentError(
          absl::StrCat("option '", o, "': the arch is given by CompileRequest::arch"));
    }
    if (f == "--include-path" || absl::StartsWith(o, "-I")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "option '", o, "': include paths are not allowed (headers travel with the request)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kjit::nvrtc
