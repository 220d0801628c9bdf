// The embedded kernel sources equal the tree they were built from; $KJIT_KERNEL_DIR replaces them.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gtest/gtest.h"
#include "runtime/kernels/kernel_sources.h"

namespace kjit::kernels {
namespace {

namespace fs = std::filesystem;

// The repository root, from this file's path (CMake passes absolute source paths).
fs::path RepoRoot() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, std::string> TreeFiles(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".cu" || ext == ".cuh" || ext == ".h")) {
      out[fs::relative(e.path(), root).generic_string()] = Slurp(e.path());
    }
  }
  return out;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(KernelSourcesTest, EmbeddedSetEqualsTheSourceTree) {
  ASSERT_EQ(std::getenv("KJIT_KERNEL_DIR"), nullptr) << "unset KJIT_KERNEL_DIR to test the embedded set";
  EXPECT_EQ(KernelSourceOrigin(), "embedded");
  const fs::path tree = RepoRoot() / "kernel_sources";
  ASSERT_TRUE(fs::is_directory(tree)) << tree;
  std::map<std::string, std::string> expected = TreeFiles(tree);
  std::vector<nvrtc::Header> headers = AllKernelHeaders();
  ASSERT_EQ(headers.size(), expected.size());
  ASSERT_FALSE(headers.empty());
  for (size_t i = 0; i < headers.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(headers[i - 1].name, headers[i].name);
    }
    auto it = expected.find(headers[i].name);
    ASSERT_NE(it, expected.end()) << headers[i].name;
    EXPECT_EQ(headers[i].content, it->second) << headers[i].name;  // byte-exact, any bytes
    auto one = KernelSource(headers[i].name);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(*one, it->second);
  }
}

TEST(KernelSourcesTest, RejectsEscapingAndMissingPaths) {
  EXPECT_EQ(KernelSource("../CMakeLists.txt").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelSource("common/../../x.h").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelSource("/etc/passwd").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelSource("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelSource("no/such/file.cuh").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(KernelSource("CMakeLists.txt").status().code(), absl::StatusCode::kNotFound);
}

TEST(KernelSourcesTest, OverrideDirectoryReplacesTheEmbeddedSet) {
  const fs::path dir = fs::path(testing::TempDir()) / "kjit_kernel_override";
  fs::remove_all(dir);
  fs::create_directories(dir / "a" / "b");
  std::ofstream(dir / "a" / "b" / "x.cuh") << "#pragma once\n// x\n";
  std::ofstream(dir / "entry.cu") << std::string("bytes\0with nul\n", 15);
  std::ofstream(dir / "notes.md") << "not a kernel file";
  ScopedEnv env("KJIT_KERNEL_DIR", dir.string());
  EXPECT_EQ(KernelSourceOrigin(), dir.string());
  std::vector<nvrtc::Header> headers = AllKernelHeaders();
  ASSERT_EQ(headers.size(), 2u);
  EXPECT_EQ(headers[0].name, "a/b/x.cuh");
  EXPECT_EQ(headers[1].name, "entry.cu");
  EXPECT_EQ(headers[1].content, std::string("bytes\0with nul\n", 15));
  EXPECT_EQ(*KernelSource("a/b/x.cuh"), "#pragma once\n// x\n");
  EXPECT_EQ(KernelSource("common/bf16.cuh").status().code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kjit::kernels
