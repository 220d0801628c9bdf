// The committed golden set and where it lives.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tests/reference/golden.h"

#ifndef KJIT_GOLDEN_SOURCE_DIR
#error "KJIT_GOLDEN_SOURCE_DIR must name the source tree's golden directory"
#endif

namespace kjit::reference {
namespace {

GoldenEntry Entry(std::string name, uint64_t seed, int heads, std::vector<int> prefix, std::vector<int> draft,
                  TreeKind tree, kernels::MaskKind mask, bool scattered) {
  CaseSpec s;
  s.seed = seed;
  s.num_heads = heads;
  s.prefix_lens = std::move(prefix);
  s.draft_lens = std::move(draft);
  s.tree = tree;
  s.mask = mask;
  s.scattered = scattered;
  return {std::move(name), s};
}

std::vector<GoldenEntry> BuildCatalog() {
  using kernels::MaskKind;
  std::vector<GoldenEntry> c;
  c.push_back(Entry("p0_d7_h8_chain_bool_contig", 101, 8, {0}, {7}, TreeKind::kChain, MaskKind::kBool, false));
  // Random bits and no prefix: empty rows (o = 0, lse = -inf) and set bits above the diagonal, which
  // is_causal must ignore.
  c.push_back(Entry("p0_d16_h8_random_packed", 102, 8, {0}, {16}, TreeKind::kRandom, MaskKind::kPacked, true));
  c.push_back(Entry("p1_d1_h8_chain_bool", 104, 8, {1}, {1}, TreeKind::kChain, MaskKind::kBool, true));
  c.push_back(Entry("p97_d33_h8_bushy_packed", 105, 8, {97}, {33}, TreeKind::kBushy, MaskKind::kPacked, true));
  c.push_back(Entry("p13_d64_h8_bushy_bool_contig", 107, 8, {13}, {64}, TreeKind::kBushy, MaskKind::kBool, false));
  c.push_back(Entry("p97_d3_h64_chain_bool_scaled", 108, 64, {97}, {3}, TreeKind::kChain, MaskKind::kBool, true));
  c.back().spec.k_scale = 0.75f;
  c.back().spec.v_scale = 1.25f;
  c.push_back(Entry("b8_mixed_h8_bushy_bool", 109, 8, {0, 1, 97, 5, 130, 33, 260, 17}, {1, 3, 4, 2, 3, 1, 1, 2},
                    TreeKind::kBushy, MaskKind::kBool, true));
  c.push_back(Entry("b3_pad2_h8_chain_packed_contig", 110, 8, {40, 9, 0}, {7, 3, 1}, TreeKind::kChain,
                    MaskKind::kPacked, false));
  c.back().spec.padded_requests = 2;
  c.back().spec.padded_draft = 3;
  // Not causal: the random bits above the diagonal count; no lse requested.
  c.push_back(Entry("b2_pad3_h8_random_bool_noncausal", 111, 8, {65, 31}, {7, 5}, TreeKind::kRandom,
                    MaskKind::kBool, true));
  c.back().spec.is_causal = false;
  c.back().spec.padded_requests = 3;
  c.back().spec.padded_draft = 2;
  c.back().spec.write_lse = false;
  // fp8 e4m3 caches, one per numerics. Written as format version 2.
  c.push_back(Entry("b2_p130_h8_bushy_bool_e4m3_dequant", 112, 8, {130, 1}, {7, 16}, TreeKind::kBushy,
                    MaskKind::kBool, true));
  c.back().spec.kv_dtype = kernels::KvDtype::kFp8E4m3;
  c.back().spec.fp8_numerics = kernels::Fp8Numerics::kDequant;
  c.push_back(Entry("b2_pad1_h8_random_packed_e4m3_fp8_scaled", 113, 8, {97, 33}, {5, 3}, TreeKind::kRandom,
                    MaskKind::kPacked, true));
  c.back().spec.kv_dtype = kernels::KvDtype::kFp8E4m3;
  c.back().spec.fp8_numerics = kernels::Fp8Numerics::kFp8;
  c.back().spec.padded_requests = 1;
  c.back().spec.padded_draft = 2;
  c.back().spec.k_scale = 0.5f;
  c.back().spec.v_scale = 2.0f;
  return c;
}

}  // namespace

const std::vector<GoldenEntry>& GoldenCatalog() {
  static const std::vector<GoldenEntry>* catalog = new std::vector<GoldenEntry>(BuildCatalog());
  return *catalog;
}

std::string GoldenDir() {
  const char* env = std::getenv("KJIT_GOLDEN_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(KJIT_GOLDEN_SOURCE_DIR);
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::UnavailableError(absl::StrCat("open ", tmp, ": ", std::strerror(errno)));
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) return absl::UnavailableError(absl::StrCat("write ", tmp, ": ", std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("rename ", tmp, " -> ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) return absl::DataLossError(absl::StrCat("read ", path));
  return s.str();
}

StatusOr<GoldenBundle> ReadGoldenFile(const std::string& path) {
  KJIT_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  StatusOr<GoldenBundle> g = ParseGolden(bytes);
  if (!g.ok()) return WithContext(g.status(), path);
  return g;
}

}  // namespace kjit::reference
