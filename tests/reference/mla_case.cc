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

// The fp8 cache of a case whose bf16 cache, slots and masks are made: the e4m3 rounding of the bf16
// values, with random codes from a stream of its own (so the rest of the case is the bf16 case's).
void MakeFp8Cache(const CaseSpec& spec, int real_requests, MlaCase& c) {
  Rng rng(spec.seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<bool> read(c.kv_cache.size() / kMlaKDim, false);
  for (int64_t i = 0; i < c.kv_indptr[real_requests]; ++i) read[c.kv_indices[i]] = true;
  c.kv_cache_fp8.resize(c.kv_cache.size());
  for (size_t i = 0; i < c.kv_cache.size(); ++i) {
    const uint64_t bits = rng.Bits();
    uint8_t code;
    if (!read[i / kMlaKDim]) {
      code = FiniteE4m3Code(static_cast<int>((bits >> 8) % 254));  // every finite value, +-448 included
    } else if ((bits & 63) == 0) {  // exponent field 0..10: zeros, subnormals, normals below 16
      code = static_cast<uint8_t>((bits & 0x80) | ((bits >> 8) % 0x58));
    } else {
      code = DoubleToE4m3(Bf16ToFloat(c.kv_cache[i]));
    }
    c.kv_cache_fp8[i] = code;
  }
  c.kv_cache.clear();
  c.kv_cache.shrink_to_fit();
}

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

void WriteEveryE4m3Code(MlaCase& c, int first_dim, int end_dim) {
  const int real = static_cast<int>(std::min(c.spec.prefix_lens.size(), c.spec.draft_lens.size()));
  first_dim = std::max(first_dim, 0);
  end_dim = std::min(end_dim, kMlaKDim);
  int64_t key = 0;
  for (int b = 0; b < std::min(real, c.batch()); ++b) {
    for (int64_t j = c.kv_indptr[b]; j < c.kv_indptr[b + 1]; ++j) {
      const int64_t slot = c.kv_indices[j];
      if (slot < 0 || slot >= c.problem.num_slots) continue;
      uint8_t* row = c.kv_cache_fp8.data() + slot * kMlaKDim;
      for (int d = first_dim; d < end_dim; ++d) row[d] = FiniteE4m3Code(static_cast<int>((key + d) % 254));
      ++key;
    }
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
  if (spec.kv_dtype == kernels::KvDtype::kFp8E4m3) MakeFp8Cache(spec, real, c);

  kernels::MlaVerifyProblem& pr = c.problem;
  pr.batch = batch;
  pr.num_heads = h;
  pr.num_q = n;
  pr.num_slots = slots;
  pr.num_kv_indices = static_cast<int64_t>(c.kv_indices.size());
  pr.mask_kind = spec.mask;
  pr.kv_dtype = spec.kv_dtype;
  pr.fp8_numerics = spec.fp8_numerics;
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
