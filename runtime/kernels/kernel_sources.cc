#include "runtime/kernels/kernel_sources.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/kernels/kernel_sources_embedded.h"

namespace kjit::kernels {
namespace {

namespace fs = std::filesystem;

const char* OverrideDir() {
  const char* dir = std::getenv("KJIT_KERNEL_DIR");
  return (dir != nullptr && *dir != '\0') ? dir : nullptr;
}

bool IsKernelFile(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".cu" || ext == ".cuh" || ext == ".h";
}

Status CheckRelative(std::string_view rel) {
  fs::path p{std::string(rel)};
  if (rel.empty() || p.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat("kernel source path '", std::string(rel),
                                                   "' must be relative to kernel_sources/"));
  }
  for (const fs::path& part : p) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel source path '", std::string(rel), "' may not contain '..'"));
    }
  }
  return absl::OkStatus();
}

StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("kernel source ", path.string(), " not found"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("reading ", path.string(), " failed"));
  return ss.str();
}

}  // namespace

StatusOr<std::string> KernelSource(std::string_view relative_path) {
  KJIT_RETURN_IF_ERROR(CheckRelative(relative_path));
  if (const char* dir = OverrideDir()) {
    return ReadFile(fs::path(dir) / std::string(relative_path));
  }
  for (size_t i = 0; i < embedded::kNumFiles; ++i) {
    const embedded::File& f = embedded::kFiles[i];
    if (relative_path == f.path) return std::string(f.data, f.size);
  }
  return absl::NotFoundError(absl::StrCat("kernel source '", std::string(relative_path),
                                          "' is not embedded (", embedded::kNumFiles, " files)"));
}

std::vector<nvrtc::Header> AllKernelHeaders() {
  std::vector<nvrtc::Header> out;
  if (const char* dir = OverrideDir()) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
      if (!it->is_regular_file(ec) || !IsKernelFile(it->path())) continue;
      auto content = ReadFile(it->path());
      if (!content.ok()) continue;  // vanished while listing: the compile reports what is missing
      out.push_back({fs::relative(it->path(), dir, ec).generic_string(), std::move(*content)});
    }
    std::sort(out.begin(), out.end(),
              [](const nvrtc::Header& a, const nvrtc::Header& b) { return a.name < b.name; });
    return out;
  }
  out.reserve(embedded::kNumFiles);
  for (size_t i = 0; i < embedded::kNumFiles; ++i) {
    const embedded::File& f = embedded::kFiles[i];
    out.push_back({f.path, std::string(f.data, f.size)});
  }
  return out;
}

std::string KernelSourceOrigin() {
  if (const char* dir = OverrideDir()) return dir;
  return "embedded";
}

}  // namespace kjit::kernels
