// Golden bundles: the format round-trips, corruption is caught, and the committed set is exactly
// what the generator and the reference produce today.
#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "tests/reference/golden.h"

namespace kjit::reference {
namespace {

MlaCase SmallCase() {
  CaseSpec s;
  s.seed = 77, s.num_heads = 2, s.prefix_lens = {3, 0}, s.draft_lens = {2, 33}, s.padded_requests = 1;
  s.mask = kernels::MaskKind::kPacked, s.k_scale = 0.5f, s.tree = TreeKind::kBushy;
  return MakeCase(s);
}

TEST(GoldenFormat, RoundTripsEveryField) {
  const MlaCase c = SmallCase();
  const RefOutput want = Reference(c);
  StatusOr<GoldenBundle> g = ParseGolden(SerializeGolden("small", c, want));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->name, "small");
  EXPECT_EQ(g->c.q, c.q);
  EXPECT_EQ(g->c.k_extend, c.k_extend);
  EXPECT_EQ(g->c.kv_cache, c.kv_cache);
  EXPECT_EQ(g->c.qo_indptr, c.qo_indptr);
  EXPECT_EQ(g->c.kv_indptr, c.kv_indptr);
  EXPECT_EQ(g->c.kv_indices, c.kv_indices);
  EXPECT_EQ(g->c.mask_indptr, c.mask_indptr);
  EXPECT_EQ(g->c.mask_bool, c.mask_bool);
  EXPECT_EQ(g->c.mask_packed, c.mask_packed);
  EXPECT_EQ(g->c.row_is_padding, c.row_is_padding);
  EXPECT_EQ(g->o, want.o);
  EXPECT_EQ(g->lse, want.lse);
  const auto &a = g->c.problem, &b = c.problem;
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_q, b.num_q);
  EXPECT_EQ(a.num_slots, b.num_slots);
  EXPECT_EQ(a.num_kv_indices, b.num_kv_indices);
  EXPECT_EQ(a.mask_len, b.mask_len);
  EXPECT_EQ(a.max_draft, b.max_draft);
  EXPECT_EQ(a.max_prefix, b.max_prefix);
  EXPECT_EQ(a.mask_kind, b.mask_kind);
  EXPECT_EQ(a.is_causal, b.is_causal);
  EXPECT_EQ(a.write_lse, b.write_lse);
  EXPECT_EQ(a.sm_scale, b.sm_scale);
  EXPECT_EQ(a.k_scale, b.k_scale);
  EXPECT_EQ(a.v_scale, b.v_scale);
  EXPECT_EQ(a.q_stride_n, b.q_stride_n);
  EXPECT_EQ(a.o_stride_n, b.o_stride_n);
  EXPECT_EQ(g->c.spec.seed, 77u);
  EXPECT_EQ(g->c.spec.tree, TreeKind::kBushy);
  EXPECT_EQ(g->c.spec.padded_requests, 1);
  EXPECT_EQ(g->c.spec.draft_lens, (std::vector<int>{2, 33}));
}

uint32_t VersionOf(const std::string& bytes) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + 8, 4);
  return v;
}

TEST(GoldenFormat, Fp8CacheRoundTripsAsVersion2AndBf16StaysVersion1) {
  CaseSpec s;
  s.seed = 78, s.num_heads = 2, s.prefix_lens = {9, 1}, s.draft_lens = {3, 2}, s.padded_requests = 1;
  s.kv_dtype = kernels::KvDtype::kFp8E4m3, s.fp8_numerics = kernels::Fp8Numerics::kFp8, s.v_scale = 2.0f;
  const MlaCase c = MakeCase(s);
  const RefOutput want = Reference(c);
  const std::string bytes = SerializeGolden("fp8", c, want);
  EXPECT_EQ(VersionOf(bytes), 2u);
  StatusOr<GoldenBundle> g = ParseGolden(bytes);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->c.kv_cache_fp8, c.kv_cache_fp8);
  EXPECT_TRUE(g->c.kv_cache.empty());
  EXPECT_EQ(g->c.problem.kv_dtype, kernels::KvDtype::kFp8E4m3);
  EXPECT_EQ(g->c.problem.fp8_numerics, kernels::Fp8Numerics::kFp8);
  EXPECT_EQ(g->c.spec.kv_dtype, kernels::KvDtype::kFp8E4m3);
  EXPECT_EQ(g->c.spec.fp8_numerics, kernels::Fp8Numerics::kFp8);
  EXPECT_EQ(g->o, want.o);
  EXPECT_EQ(Reference(g->c).o, want.o) << "the parsed case must compute the same numerics";
  EXPECT_EQ(VersionOf(SerializeGolden("small", SmallCase(), Reference(SmallCase()))), 1u);
}

TEST(GoldenFormat, AnUnknownVersionIsRefusedByVersion) {
  const MlaCase c = SmallCase();
  std::string bytes = SerializeGolden("small", c, Reference(c));
  const uint32_t v3 = 3;
  std::memcpy(bytes.data() + 8, &v3, 4);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  const size_t body = bytes.size() - SHA256_DIGEST_LENGTH;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), body, digest);
  std::memcpy(bytes.data() + body, digest, sizeof(digest));
  EXPECT_EQ(ParseGolden(bytes).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GoldenFormat, AnyFlippedByteFailsTheChecksum) {
  const MlaCase c = SmallCase();
  const std::string bytes = SerializeGolden("small", c, Reference(c));
  for (size_t at : {size_t{0}, size_t{9}, size_t{20}, bytes.size() / 2, bytes.size() - 40, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] ^= 0x10;
    const StatusOr<GoldenBundle> g = ParseGolden(bad);
    ASSERT_FALSE(g.ok()) << "byte " << at;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kDataLoss) << "byte " << at << ": " << g.status();
  }
}

TEST(GoldenFormat, TruncationFails) {
  const MlaCase c = SmallCase();
  const std::string bytes = SerializeGolden("small", c, Reference(c));
  for (size_t keep : {size_t{0}, size_t{7}, size_t{40}, bytes.size() / 3, bytes.size() - 1}) {
    const StatusOr<GoldenBundle> g = ParseGolden(std::string_view(bytes).substr(0, keep));
    EXPECT_EQ(g.status().code(), absl::StatusCode::kDataLoss) << "kept " << keep << ": " << g.status();
  }
}

TEST(GoldenFormat, CatalogCoversTheRequiredShapes) {
  std::set<int> prefixes, drafts, heads, batches;
  bool scattered = false, contiguous = false, chain = false, bushy = false, padded = false, packed = false,
       boolean = false, non_causal = false, fp8_dequant = false, fp8_numerics = false;
  for (const GoldenEntry& e : GoldenCatalog()) {
    const CaseSpec& s = e.spec;
    prefixes.insert(s.prefix_lens.begin(), s.prefix_lens.end());
    drafts.insert(s.draft_lens.begin(), s.draft_lens.end());
    heads.insert(s.num_heads);
    batches.insert(static_cast<int>(s.prefix_lens.size()) + s.padded_requests);
    (s.scattered ? scattered : contiguous) = true;
    chain |= s.tree == TreeKind::kChain;
    bushy |= s.tree == TreeKind::kBushy;
    padded |= s.padded_requests > 0;
    (s.mask == kernels::MaskKind::kPacked ? packed : boolean) = true;
    non_causal |= !s.is_causal;
    if (s.kv_dtype == kernels::KvDtype::kFp8E4m3) {
      (s.fp8_numerics == kernels::Fp8Numerics::kFp8 ? fp8_numerics : fp8_dequant) = true;
    }
  }
  for (int p : {0, 1, 97}) EXPECT_TRUE(prefixes.count(p)) << "P = " << p;
  for (int d : {1, 7, 16, 33, 64}) EXPECT_TRUE(drafts.count(d)) << "D = " << d;
  for (int h : {8, 64}) EXPECT_TRUE(heads.count(h)) << "H = " << h;
  EXPECT_TRUE(batches.count(8));
  EXPECT_TRUE(scattered && contiguous && chain && bushy && padded && packed && boolean && non_causal);
  EXPECT_TRUE(fp8_dequant && fp8_numerics) << "an fp8 cache in both numerics";
}

std::string GoldenPath(const std::string& name) { return reference::GoldenPath(GoldenDir(), name); }

TEST(GoldenCommitted, DirectoryHoldsExactlyTheCatalog) {
  std::set<std::string> files, names;
  for (const auto& entry : std::filesystem::directory_iterator(GoldenDir())) {
    files.insert(entry.path().filename().string());
  }
  for (const GoldenEntry& e : GoldenCatalog()) names.insert(e.name + std::string(kGoldenExtension));
  EXPECT_EQ(files, names) << "regenerate with: make_golden " << GoldenDir();
}

TEST(GoldenCommitted, RegeneratingGivesIdenticalBytes) {
  for (const GoldenEntry& e : GoldenCatalog()) {
    StatusOr<std::string> stored = ReadWholeFile(GoldenPath(e.name));
    ASSERT_TRUE(stored.ok()) << stored.status();
    const MlaCase c = MakeCase(e.spec);
    EXPECT_TRUE(SerializeGolden(e.name, c, Reference(c)) == *stored) << e.name << " differs from the generator";
  }
}

TEST(GoldenCommitted, ReferenceReproducesTheStoredOutput) {
  for (const GoldenEntry& e : GoldenCatalog()) {
    StatusOr<GoldenBundle> g = ReadGoldenFile(GoldenPath(e.name));
    ASSERT_TRUE(g.ok()) << g.status();
    const RefOutput out = Reference(g->c);  // from the stored inputs, not the generator
    ASSERT_EQ(out.o.size(), g->o.size()) << e.name;
    for (size_t i = 0; i < out.o.size(); ++i) {
      ASSERT_NEAR(out.o[i], g->o[i], 1e-12 * std::max(1.0, std::fabs(g->o[i]))) << e.name << " o[" << i << "]";
    }
    for (size_t i = 0; i < out.lse.size(); ++i) {
      if (std::isinf(g->lse[i])) {
        ASSERT_EQ(out.lse[i], g->lse[i]) << e.name << " lse[" << i << "]";
      } else {
        ASSERT_NEAR(out.lse[i], g->lse[i], 1e-12 * std::max(1.0, std::fabs(g->lse[i]))) << e.name;
      }
    }
  }
}

}  // namespace
}  // namespace kjit::reference
