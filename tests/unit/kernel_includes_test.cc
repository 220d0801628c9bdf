// A program's headers are its include closure (kernel_sources.h: IncludedKernelHeaders), so cache
// keys follow exactly the files a compile can read: editing a file the program never includes
// keeps its keys, editing one it includes changes them.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "jit_cache/cubin_cache.h"
#include "runtime/kernels/registry.h"
#include "runtime/kernels/kernel_compiler.h"
#include "runtime/kernels/kernel_sources.h"

namespace kjit::kernels {
namespace {

namespace fs = std::filesystem;

using Names = std::vector<std::string>;

std::set<std::string> HeaderNames(const std::vector<nvrtc::Header>& headers) {
  std::set<std::string> out;
  for (const auto& h : headers) out.insert(h.name);
  return out;
}

TEST(ScanIncludes, FollowsDirectivesInEveryBranchAndSkipsComments) {
  const IncludeDirectives d = ScanIncludes(
      "#include \"a.cuh\"\n"
      "  #  include <b/c.h>  // trailing comment\n"
      "#if 0\n#include \"in_if_0.cuh\"\n#else\n#include_next \"in_else.cuh\"\n#endif\n"
      "// #include \"line_comment.cuh\"\n"
      "/* #include \"block_comment.cuh\"\n#include \"still_comment.cuh\" */\n"
      "/* spans\n lines */ #include \"after_comment.cuh\"\n"
      "int x = 1; /* then */ #include \"not_first_on_its_line.cuh\"\n"
      "const char* s = \"/* not a comment\"; int y = 1'000'000; char q = '\"';\n"
      "#include \"after_literals.cuh\"\n"
      "const char* r = R\"x(*/ \" /*)x\";\n"
      "#include \"after_raw.cuh\"\n"
      "#include \\\n  \"spliced.cuh\"\n"
      "#include \"a//b.cuh\"\n"
      "#define X 1 /* not an include */\n"
      "#pragma once\n");
  EXPECT_EQ(d.names, (Names{"a.cuh", "b/c.h", "in_if_0.cuh", "in_else.cuh", "after_comment.cuh",
                            "after_literals.cuh", "after_raw.cuh", "spliced.cuh", "a//b.cuh"}));
  EXPECT_FALSE(d.computed);
  EXPECT_TRUE(ScanIncludes("#define H \"a.cuh\"\n#include H\n").computed);
  EXPECT_TRUE(ScanIncludes("").names.empty());
}

TEST(IncludedKernelHeaders, MlaVerifyGetsWhatItIncludesAndNothingElse) {
  ASSERT_EQ(std::getenv("KJIT_KERNEL_DIR"), nullptr) << "unset KJIT_KERNEL_DIR to test the embedded set";
  auto entry = KernelSource("mla_verify/mla_verify.cu");
  ASSERT_TRUE(entry.ok()) << entry.status();
  const std::set<std::string> names = HeaderNames(IncludedKernelHeaders(*entry));
  for (const char* used : {"mla_verify/combine.cuh", "mla_verify/split_kernel.cuh", "mla_verify/split_wgmma.cuh", "mla_verify/split_wgmma_fp8.cuh", "mla_verify/wgmma_consumer.cuh",
                           "mla_verify/mask.cuh", "mla_verify/params.h", "mla_verify/request.cuh",
                           "mla_verify/traits.h", "common/bf16.cuh", "common/mbarrier.cuh", "common/mma.cuh",
                           "common/softmax.cuh", "common/sync.cuh", "common/wgmma.cuh"}) {
    EXPECT_EQ(names.count(used), 1u) << used;
  }
  for (const char* unused : {"bench/mma_peak.cu", "mla_verify_naive/naive_params.h", "mla_verify/mla_verify.cu"}) {
    EXPECT_EQ(names.count(unused), 0u) << unused;
  }
  // The compile request carries the closure of the entry source.
  const Specialization spec = FamilySpecializations("mla_verify").front();
  auto req = BuildRequest(spec, "sm_120");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(HeaderNames(req->headers), names);
}

class KernelTreeCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(testing::TempDir()) / ("kjit_includes_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    const fs::path repo = fs::path(__FILE__).parent_path().parent_path().parent_path();
    fs::copy(repo / "kernel_sources", root_ / "tree", fs::copy_options::recursive);
    setenv("KJIT_KERNEL_DIR", (root_ / "tree").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("KJIT_KERNEL_DIR");
    fs::remove_all(root_);
  }
  void Append(const std::string& file, const std::string& text) {
    std::ofstream(root_ / "tree" / file, std::ios::app) << text;
  }
  // What of each mla_verify request depends on kernel_sources/: the key's source and headers.
  static std::vector<std::string> RequestContents() {
    std::vector<std::string> out;
    for (const Specialization& spec : FamilySpecializations("mla_verify")) {
      auto req = BuildRequest(spec, "sm_120");
      EXPECT_TRUE(req.ok()) << req.status();
      if (!req.ok()) continue;
      std::string all = req->source;
      for (const auto& h : req->headers) all += "\n--- " + h.name + "\n" + h.content;
      out.push_back(std::move(all));
    }
    return out;
  }
  fs::path root_;
};

TEST_F(KernelTreeCopy, IncludesResolveRelativeToTheTreeLikeNvrtc) {
  fs::create_directories(root_ / "tree" / "t");
  std::ofstream(root_ / "tree" / "t" / "x.cuh") << "#include \"y.cuh\"\n#include <cuda_bf16.h>\n#include \"none.cuh\"\n";
  std::ofstream(root_ / "tree" / "t" / "y.cuh") << "// beside x.cuh: NVRTC does not look here\n";
  std::ofstream(root_ / "tree" / "y.cuh") << "#include <t/z.h>\n";
  std::ofstream(root_ / "tree" / "t" / "z.h") << "// found through an angle-bracket include\n";
  EXPECT_EQ(HeaderNames(IncludedKernelHeaders("#include \"t/x.cuh\"\n")),
            (std::set<std::string>{"t/x.cuh", "t/z.h", "y.cuh"}));
  // A file that names an include through a macro could read anything: every file is given.
  Append("t/x.cuh", "#define Z \"t/z.h\"\n#include Z\n");
  EXPECT_EQ(IncludedKernelHeaders("#include \"t/x.cuh\"\n").size(), AllKernelHeaders().size());
}

TEST_F(KernelTreeCopy, KeysFollowOnlyTheClosure) {
  const std::vector<std::string> before = RequestContents();
  ASSERT_FALSE(before.empty());
  // One specialization through a real cache: its key, and whether it compiles again.
  cache::Options opts;
  opts.dir = (root_ / "cache").string();
  auto cache = cache::CubinCache::Open(opts);
  KernelCompiler compiler(cache.get(), 1);
  const Specialization spec = FamilySpecializations("mla_verify").front();
  auto first = compiler.Get(spec, "sm_120");
  ASSERT_TRUE(first.ok()) << first.status();

  Append("bench/mma_peak.cu", "// edited\n");
  std::ofstream(root_ / "tree" / "common" / "unrelated.cuh") << "#pragma once\n";
  EXPECT_EQ(RequestContents(), before);
  auto unrelated = compiler.Get(spec, "sm_120");
  ASSERT_TRUE(unrelated.ok()) << unrelated.status();
  EXPECT_EQ(unrelated->cache_key, first->cache_key);
  EXPECT_NE(unrelated->origin, CompiledKernel::Origin::kCompiled);

  Append("common/bf16.cuh", "// edited\n");
  const std::vector<std::string> after = RequestContents();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_NE(after[i], before[i]) << i;
  auto edited = compiler.Get(spec, "sm_120");
  ASSERT_TRUE(edited.ok()) << edited.status();
  EXPECT_NE(edited->cache_key, first->cache_key);
  EXPECT_EQ(edited->origin, CompiledKernel::Origin::kCompiled);
  EXPECT_EQ(edited->cubin, first->cubin);  // a comment changes the key, not the code
}

}  // namespace
}  // namespace kjit::kernels
