// Deterministic generation of MLA verify inputs. The random helpers are written out (not
// std::*_distribution, whose output differs between standard libraries) so that the committed golden
// bundles regenerate byte for byte.
#include <algorithm>
#include <cmath>
#include <random>

#include "tests/reference/mla_reference.h"

namespace kjit::reference {
namespace {

using kernels::kMlaKDim;

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Bits() { return engine_(); }
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : engine_() % n; }  // bias < 2^-40 for our n
  double Normal() {  // Box-Muller, one value per call (the pair's second value is dropped)
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  std::mt19937_64 engine_;
};

void FillNormalBf16(Rng& rng, std::vector<uint16_t>& v) {
  for (auto& x : v) x = FloatToBf16(static_cast<float>(rng.Normal()));
}

int CeilDiv32(int d) { return (d + 31) / 32; }

// allowed[r * D + c]: the tree part of the mask for one real request.
std::vector<uint8_t> MakeTree(Rng& rng, TreeKind kind, int d) {
  std::vector<uint8_t> allowed(static_cast<size_t>(d) * d, 0);
  switch (kind) {
    case TreeKind::kChain:
      for (int r = 0; r < d; ++r)
        for (int c = 0; c <= r; ++c) allowed[r * d + c] = 1;
      break;
    case TreeKind::kBushy: {
      std::vector<int> parent(d, -1);
      for (int r = 1; r < d; ++r) parent[r] = static_cast<int>(rng.Below(r));
      for (int r = 0; r < d; ++r)
        for (int a = r; a >= 0; a = parent[a]) allowed[r * d + a] = 1;
      break;
    }
    case TreeKind::kRandom:
      for (auto& bit : allowed) bit = static_cast<uint8_t>(rng.Bits() & 1u);
      break;
  }
  return allowed;
}

}  // namespace

void PackMaskFromBool(MlaCase& c) {
  c.mask_packed.clear();
  for (int b = 0; b < c.batch(); ++b) {
    const int p = c.prefix_len(b), d = c.draft_len(b), words = CeilDiv32(d);
    for (int r = 0; r < d; ++r) {
      std::vector<uint32_t> row(words, 0);
      for (int col = 0; col < d; ++col) {
        const size_t at = c.mask_indptr[b] + static_cast<int64_t>(r) * (p + d) + p + col;
        if (c.mask_bool[at] != 0) row[col / 32] |= 1u << (col % 32);
      }
      c.mask_packed.insert(c.mask_packed.end(), row.begin(), row.end());
    }
  }
  if (c.problem.mask_kind == kernels::MaskKind::kPacked) {
    c.problem.mask_len = static_cast<int64_t>(c.mask_packed.size());
  }
}

MlaCase MakeCase(const CaseSpec& spec) {
  Rng rng(spec.seed);
  MlaCase c;
  c.spec = spec;
  const int real = static_cast<int>(std::min(spec.prefix_lens.size(), spec.draft_lens.size()));
  const int batch = real + spec.padded_requests;
  c.problem.batch = batch;  // PackMaskFromBool walks the requests
  std::vector<int> prefix(batch, 1), draft(batch, spec.padded_draft);
  for (int b = 0; b < real; ++b) {
    prefix[b] = spec.prefix_lens[b];
    draft[b] = spec.draft_lens[b];
  }
  c.qo_indptr.assign(batch + 1, 0);
  c.kv_indptr.assign(batch + 1, 0);
  c.mask_indptr.assign(batch + 1, 0);
  int64_t real_prefix = 0;
  for (int b = 0; b < batch; ++b) {
    c.qo_indptr[b + 1] = c.qo_indptr[b] + draft[b];
    c.kv_indptr[b + 1] = c.kv_indptr[b] + prefix[b];
    c.mask_indptr[b + 1] = c.mask_indptr[b] + static_cast<int64_t>(draft[b]) * (prefix[b] + draft[b]);
    if (b < real) real_prefix += prefix[b];
  }
  const int64_t n = c.qo_indptr[batch];
  const int64_t slots = 1 + real_prefix + spec.extra_slots;
  const int h = spec.num_heads;

  c.q.resize(static_cast<size_t>(n) * h * kMlaKDim);
  c.k_extend.resize(static_cast<size_t>(n) * kMlaKDim);
  c.kv_cache.resize(static_cast<size_t>(slots) * kMlaKDim);
  FillNormalBf16(rng, c.q);
  FillNormalBf16(rng, c.k_extend);
  FillNormalBf16(rng, c.kv_cache);

  // Real prefixes use distinct slots in 1..S-1; padded requests point at the dummy slot 0.
  std::vector<int64_t> order(slots - 1);
  for (int64_t i = 0; i < slots - 1; ++i) order[i] = i + 1;
  if (spec.scattered) {
    for (int64_t i = slots - 2; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
  }
  c.kv_indices.reserve(c.kv_indptr[batch]);
  for (int b = 0, next = 0; b < batch; ++b) {
    for (int j = 0; j < prefix[b]; ++j) c.kv_indices.push_back(b < real ? order[next++] : 0);
  }

  c.mask_bool.assign(c.mask_indptr[batch], 0);
  c.row_is_padding.assign(n, false);
  for (int b = 0; b < batch; ++b) {
    const int p = prefix[b], d = draft[b];
    uint8_t* rows = c.mask_bool.data() + c.mask_indptr[b];
    if (b >= real) {  // stale bytes of a padded request: any value 0..255
      for (int64_t i = 0; i < static_cast<int64_t>(d) * (p + d); ++i) rows[i] = rng.Bits() & 0xffu;
      for (int r = 0; r < d; ++r) c.row_is_padding[c.qo_indptr[b] + r] = true;
      continue;
    }
    const std::vector<uint8_t> tree = MakeTree(rng, spec.tree, d);
    for (int r = 0; r < d; ++r) {
      uint8_t* row = rows + static_cast<int64_t>(r) * (p + d);
      for (int j = 0; j < p; ++j) row[j] = rng.Bits() & 1u;  // the skipped prefix columns: never read
      for (int col = 0; col < d; ++col) row[p + col] = tree[r * d + col];
    }
  }
  PackMaskFromBool(c);
  for (int b = real; b < batch; ++b) {  // padded rows' packed words are stale too, bits >= D included
    int64_t word = 0;
    for (int b2 = 0; b2 < b; ++b2) word += static_cast<int64_t>(draft[b2]) * CeilDiv32(draft[b2]);
    for (int64_t i = 0; i < static_cast<int64_t>(draft[b]) * CeilDiv32(draft[b]); ++i) {
      c.mask_packed[word + i] = static_cast<uint32_t>(rng.Bits());
    }
  }

  kernels::MlaVerifyProblem& pr = c.problem;
  pr.batch = batch;
  pr.num_heads = h;
  pr.num_q = n;
  pr.num_slots = slots;
  pr.num_kv_indices = static_cast<int64_t>(c.kv_indices.size());
  pr.mask_kind = spec.mask;
  pr.mask_len = spec.mask == kernels::MaskKind::kBool ? static_cast<int64_t>(c.mask_bool.size())
                                                      : static_cast<int64_t>(c.mask_packed.size());
  pr.max_draft = batch > 0 ? *std::max_element(draft.begin(), draft.end()) : 0;
  pr.max_prefix = batch > 0 ? *std::max_element(prefix.begin(), prefix.end()) : 0;
  pr.is_causal = spec.is_causal;
  pr.write_lse = spec.write_lse;
  pr.sm_scale = spec.sm_scale;
  pr.k_scale = spec.k_scale;
  pr.v_scale = spec.v_scale;
  pr.q_stride_n = static_cast<int64_t>(h) * kMlaKDim;
  pr.q_stride_h = kMlaKDim;
  pr.k_extend_stride_n = kMlaKDim;
  pr.o_stride_n = static_cast<int64_t>(h) * kernels::kMlaVDim;
  pr.o_stride_h = kernels::kMlaVDim;
  return c;
}

}  // namespace kjit::reference
