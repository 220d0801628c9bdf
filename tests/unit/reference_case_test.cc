// The generator: deterministic, and its trees, layouts and padding are what the contract says.
#include <gtest/gtest.h>

#include <set>

#include "tests/reference/mla_reference.h"

namespace kjit::reference {
namespace {

bool Bit(const MlaCase& c, int b, int r, int col) {
  const int p = c.prefix_len(b), d = c.draft_len(b);
  return c.mask_bool[c.mask_indptr[b] + static_cast<int64_t>(r) * (p + d) + p + col] != 0;
}

TEST(ReferenceCase, SameSpecSameBytesOtherSeedOtherValues) {
  CaseSpec s;
  s.seed = 5, s.prefix_lens = {9, 0}, s.draft_lens = {4, 2}, s.padded_requests = 1;
  const MlaCase a = MakeCase(s), b = MakeCase(s);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.kv_cache, b.kv_cache);
  EXPECT_EQ(a.kv_indices, b.kv_indices);
  EXPECT_EQ(a.mask_bool, b.mask_bool);
  EXPECT_EQ(a.mask_packed, b.mask_packed);
  s.seed = 6;
  EXPECT_NE(MakeCase(s).q, a.q);
}

TEST(ReferenceCase, LayoutMatchesTheInterfaceTable) {
  CaseSpec s;
  s.seed = 3, s.num_heads = 8, s.prefix_lens = {97, 0, 5}, s.draft_lens = {7, 33, 1}, s.padded_requests = 2;
  s.padded_draft = 3;
  const MlaCase c = MakeCase(s);
  const auto& p = c.problem;
  ASSERT_EQ(p.batch, 5);
  ASSERT_EQ(p.num_q, 7 + 33 + 1 + 3 + 3);
  EXPECT_EQ(c.q.size(), static_cast<size_t>(p.num_q * 8 * 576));
  EXPECT_EQ(c.k_extend.size(), static_cast<size_t>(p.num_q * 576));
  EXPECT_EQ(p.num_slots, 1 + 102 + s.extra_slots);
  EXPECT_EQ(c.kv_indptr, (std::vector<int32_t>{0, 97, 97, 102, 103, 104}));
  EXPECT_EQ(c.mask_indptr.back(), 7 * 104 + 33 * 33 + 1 * 6 + 2 * 3 * 4);
  EXPECT_EQ(c.mask_packed.size(), static_cast<size_t>(7 + 33 * 2 + 1 + 3 + 3));
  EXPECT_EQ(p.mask_len, static_cast<int64_t>(c.mask_bool.size()));
  EXPECT_EQ(p.max_draft, 33);
  EXPECT_EQ(p.max_prefix, 97);
  // Real prefixes: distinct slots in [1, S); padded requests: the dummy slot 0.
  std::set<int64_t> seen;
  for (int j = 0; j < 102; ++j) {
    EXPECT_GE(c.kv_indices[j], 1);
    EXPECT_LT(c.kv_indices[j], p.num_slots);
    EXPECT_TRUE(seen.insert(c.kv_indices[j]).second) << "slot reused";
  }
  EXPECT_EQ(c.kv_indices[102], 0);
  EXPECT_EQ(c.kv_indices[103], 0);
  for (int64_t n = 0; n < p.num_q; ++n) EXPECT_EQ(c.row_is_padding[n], n >= 41) << "row " << n;
}

TEST(ReferenceCase, ContiguousIndicesCountUpFromSlotOne) {
  CaseSpec s;
  s.prefix_lens = {3, 2}, s.draft_lens = {1, 1}, s.scattered = false;
  EXPECT_EQ(MakeCase(s).kv_indices, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST(ReferenceCase, ChainRowsSeeEverythingUpToThemselves) {
  CaseSpec s;
  s.prefix_lens = {4}, s.draft_lens = {6}, s.tree = TreeKind::kChain;
  const MlaCase c = MakeCase(s);
  for (int r = 0; r < 6; ++r)
    for (int col = 0; col < 6; ++col) EXPECT_EQ(Bit(c, 0, r, col), col <= r) << r << "," << col;
}

TEST(ReferenceCase, BushyRowsSeeTheirAncestorsAndThemselves) {
  CaseSpec s;
  s.seed = 9, s.prefix_lens = {2}, s.draft_lens = {33}, s.tree = TreeKind::kBushy;
  const MlaCase c = MakeCase(s);
  int max_children = 0;
  std::vector<int> children(33, 0);
  for (int r = 0; r < 33; ++r) {
    ASSERT_TRUE(Bit(c, 0, r, r)) << "row " << r << " does not see itself";
    for (int col = r + 1; col < 33; ++col) ASSERT_FALSE(Bit(c, 0, r, col));
    if (r == 0) continue;
    int parent = -1;  // the deepest other node r sees; r's set must be parent's set plus r
    for (int col = r - 1; col >= 0 && parent < 0; --col) parent = Bit(c, 0, r, col) ? col : -1;
    ASSERT_GE(parent, 0) << "row " << r << " has no parent";
    for (int col = 0; col < r; ++col) ASSERT_EQ(Bit(c, 0, r, col), Bit(c, 0, parent, col)) << r << "," << col;
    max_children = std::max(max_children, ++children[parent]);
  }
  EXPECT_GE(max_children, 2) << "not a tree with branches";
}

TEST(ReferenceCase, PaddedRequestsHaveOnePrefixSlotAndStaleMaskBytes) {
  CaseSpec s;
  s.seed = 4, s.prefix_lens = {5}, s.draft_lens = {2}, s.padded_requests = 3, s.padded_draft = 8;
  const MlaCase c = MakeCase(s);
  int beyond_bool = 0;
  for (int b = 1; b < 4; ++b) {
    EXPECT_EQ(c.prefix_len(b), 1);
    EXPECT_EQ(c.draft_len(b), 8);
    for (int64_t i = c.mask_indptr[b]; i < c.mask_indptr[b + 1]; ++i) beyond_bool += c.mask_bool[i] > 1;
  }
  EXPECT_GT(beyond_bool, 0) << "stale bytes look like a clean 0/1 mask";
}

}  // namespace
}  // namespace kjit::reference
