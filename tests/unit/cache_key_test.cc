// The key covers everything that determines the cubin, and nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "jit_cache/cubin_cache.h"
#include "tests/unit/cache_test_util.h"

namespace kjit::cache {
namespace {

using testing::FakeInputs;

TEST(CacheKey, IsStableHexSha256) {
  const std::string a = ComputeKey(FakeInputs(1));
  EXPECT_EQ(a, ComputeKey(FakeInputs(1)));
  EXPECT_TRUE(IsValidKey(a)) << a;
  EXPECT_FALSE(IsValidKey(a.substr(1)));
  EXPECT_FALSE(IsValidKey("../" + a.substr(3)));
  std::string upper = a;
  upper[0] = 'A';
  EXPECT_FALSE(IsValidKey(upper));
}

TEST(CacheKey, EveryInputChangesTheKey) {
  const KeyInputs base = FakeInputs(1);
  const std::string k0 = ComputeKey(base);
  std::vector<std::pair<std::string, KeyInputs>> variants;
  auto add = [&](std::string what, auto mutate) {
    KeyInputs in = base;
    mutate(in);
    variants.emplace_back(std::move(what), std::move(in));
  };
  add("source", [](KeyInputs& in) { in.source += " "; });
  add("header content", [](KeyInputs& in) { in.headers[1].second += "\n#define X 1"; });
  add("header name", [](KeyInputs& in) { in.headers[0].first = "common/c.cuh"; });
  add("extra header", [](KeyInputs& in) { in.headers.emplace_back("d.cuh", ""); });
  add("toolkit", [](KeyInputs& in) { in.toolkit_id = "13.0 (other build)"; });
  add("option", [](KeyInputs& in) { in.options.push_back("-lineinfo"); });
  add("option order", [](KeyInputs& in) { std::swap(in.options[0], in.options[1]); });
  add("arch sm_120a", [](KeyInputs& in) { in.arch = "sm_120a"; });
  add("output kind", [](KeyInputs& in) { in.output_kind = "ptx"; });
  add("nvrtc version", [](KeyInputs& in) { in.nvrtc_version = "13.1"; });
  add("name expression", [](KeyInputs& in) { in.name_expressions.push_back("k2"); });
  std::set<std::string> seen = {k0};
  for (const auto& [what, in] : variants) {
    const std::string k = ComputeKey(in);
    EXPECT_NE(k, k0) << what;
    EXPECT_TRUE(seen.insert(k).second) << what << " collides with another variant";
  }
}

TEST(CacheKey, OrderOfHeadersAndNameExpressionsDoesNotMatter) {
  KeyInputs a = FakeInputs(2);
  a.name_expressions = {"k<1>", "k<2>", "k<3>"};
  KeyInputs b = a;
  std::reverse(b.headers.begin(), b.headers.end());
  std::reverse(b.name_expressions.begin(), b.name_expressions.end());
  EXPECT_EQ(ComputeKey(a), ComputeKey(b));
}

TEST(CacheKey, FieldBoundariesAreLengthPrefixed) {
  KeyInputs a = FakeInputs(3), b = FakeInputs(3);
  a.headers = {{"ab", "c"}};
  b.headers = {{"a", "bc"}};
  EXPECT_NE(ComputeKey(a), ComputeKey(b));
  a = b = FakeInputs(3);
  a.options = {"-DA", "-DB"};
  b.options = {"-DA-DB"};
  EXPECT_NE(ComputeKey(a), ComputeKey(b));
  a = b = FakeInputs(3);
  a.source = "x";
  a.toolkit_id = "y";
  b.source = "xy";
  b.toolkit_id = "";
  EXPECT_NE(ComputeKey(a), ComputeKey(b));
}

}  // namespace
}  // namespace kjit::cache
