// Shared pieces of the cache tests: a temporary directory, fake compiles with deterministic
// cubins, and direct access to entry files.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "jit_cache/cubin_cache.h"

namespace kjit::cache::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kjit-cache-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline KeyInputs FakeInputs(int n, std::string arch = "sm_120") {
  KeyInputs in;
  in.source = "// program " + std::to_string(n) + "\n__global__ void k() {}\n";
  in.headers = {{"common/a.cuh", "// a"}, {"common/b.cuh", "// b"}};
  in.toolkit_id = "13.0 (test build)";
  in.options = {"-std=c++17", "--gpu-architecture=" + arch};
  in.arch = std::move(arch);
  in.nvrtc_version = "13.0";
  in.name_expressions = {"k"};
  return in;
}

inline Request FakeRequest(int n, std::string arch = "sm_120") {
  Request r;
  r.key = ComputeKey(FakeInputs(n, arch));
  r.arch = arch;
  r.family = "fake";
  r.specialization = "s" + std::to_string(n);
  return r;
}

// Deterministic bytes for a key: what a compile of that key "produces".
inline std::vector<char> FakeCubin(const std::string& key, size_t bytes = 4096) {
  std::vector<char> out(bytes);
  uint32_t x = 2166136261u;
  for (char c : key) x = (x ^ static_cast<unsigned char>(c)) * 16777619u;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<char>(x >> 24);
  }
  return out;
}

inline StatusOr<Entry> FakeEntry(const Request& r, size_t bytes = 4096) {
  Entry e;
  e.meta.family = r.family;
  e.meta.specialization = r.specialization;
  e.meta.arch = r.arch;
  e.meta.nvrtc_version = "13.0";
  e.meta.options = {"-std=c++17", "--gpu-architecture=" + r.arch, "with\ttab and \"quotes\""};
  e.meta.kernels = {{"k<1>", {"_Z1kILi1EEvv", 40, 0, 4, 1024, 16}}, {"k<2>", {"_Z1kILi2EEvv", 96, 8, 8, 0, 0}}};
  e.meta.compile_ms = 12.5;
  e.cubin = FakeCubin(r.key, bytes);
  return e;
}

// A compile callback that counts its calls.
inline std::function<StatusOr<Entry>()> CountingCompile(const Request& r, std::atomic<int>* calls,
                                                        size_t bytes = 4096) {
  return [r, calls, bytes] {
    ++*calls;
    return FakeEntry(r, bytes);
  };
}

inline std::string EntryPath(const std::string& dir, const std::string& key) {
  return dir + "/v1/" + key + ".cubin";
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline Options DirOptions(const std::string& dir, uint64_t max_bytes = 0) {
  Options o;
  o.dir = dir;
  o.max_bytes = max_bytes;
  return o;
}

}  // namespace kjit::cache::testing
