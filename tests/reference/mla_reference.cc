// The float64 reference: a direct transcription of KERNEL.md's formula, one (row, head) at a time.
// Keys are widened once per request (bf16 or e4m3 -> float is exact, and float * float is exact in
// double), and the independent (row, head) pairs are spread over threads: each pair is computed
// sequentially by one thread into its own outputs, so the result does not depend on the thread count.
#include "tests/reference/mla_reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

namespace kjit::reference {
namespace {

using kernels::kMlaKDim;
using kernels::kMlaVDim;

bool TreeBit(const MlaCase& c, int b, int r, int col) {
  const int p = c.prefix_len(b), d = c.draft_len(b);
  if (c.problem.mask_kind == kernels::MaskKind::kBool) {
    const int64_t at = c.mask_indptr[b] + static_cast<int64_t>(r) * (p + d) + p + col;
    return at >= 0 && at < static_cast<int64_t>(c.mask_bool.size()) && c.mask_bool[at] != 0;
  }
  int64_t word = 0;
  for (int b2 = 0; b2 < b; ++b2) word += static_cast<int64_t>(c.draft_len(b2)) * ((c.draft_len(b2) + 31) / 32);
  word += static_cast<int64_t>(r) * ((d + 31) / 32) + col / 32;
  return word < static_cast<int64_t>(c.mask_packed.size()) && ((c.mask_packed[word] >> (col % 32)) & 1u);
}

bool RequestValid(const MlaCase& c, int b) {
  const auto& pr = c.problem;
  return c.qo_indptr[b] >= 0 && c.qo_indptr[b] <= c.qo_indptr[b + 1] && c.qo_indptr[b + 1] <= pr.num_q &&
         c.kv_indptr[b] >= 0 && c.kv_indptr[b] <= c.kv_indptr[b + 1] &&
         c.kv_indptr[b + 1] <= static_cast<int64_t>(c.kv_indices.size());
}

// The attended keys of one request, widened: prefix keys (valid slots only), then the D tree keys.
struct RequestKeys {
  std::vector<float> rows;  // [num_prefix + D][576]
  int num_prefix = 0;
};

RequestKeys GatherKeys(const MlaCase& c, int b) {
  RequestKeys k;
  const auto& pr = c.problem;
  const bool fp8 = pr.kv_dtype == kernels::KvDtype::kFp8E4m3;
  std::vector<int64_t> slots;
  for (int j = 0; j < c.prefix_len(b); ++j) {
    const int64_t slot = c.kv_indices[c.kv_indptr[b] + j];
    if (slot >= 0 && slot < pr.num_slots) slots.push_back(slot);  // else masked
  }
  k.num_prefix = static_cast<int>(slots.size());
  k.rows.resize((slots.size() + c.draft_len(b)) * kMlaKDim);
  float* out = k.rows.data();
  for (const int64_t slot : slots) {  // every e4m3 value is a float: the decode stays exact
    for (int e = 0; e < kMlaKDim; ++e) {
      *out++ = fp8 ? static_cast<float>(E4m3ToDouble(c.kv_cache_fp8[slot * kMlaKDim + e]))
                   : Bf16ToFloat(c.kv_cache[slot * kMlaKDim + e]);
    }
  }
  for (int col = 0; col < c.draft_len(b); ++col) {
    const uint16_t* src = c.k_extend.data() + (c.qo_indptr[b] + col) * pr.k_extend_stride_n;
    for (int e = 0; e < kMlaKDim; ++e) *out++ = Bf16ToFloat(src[e]);
  }
  return k;
}

double Dot(const double* q, const float* k) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int i = 0; i < kMlaKDim; i += 4) {
    s0 += q[i] * k[i];
    s1 += q[i + 1] * k[i + 1];
    s2 += q[i + 2] * k[i + 2];
    s3 += q[i + 3] * k[i + 3];
  }
  return (s0 + s1) + (s2 + s3);
}

// The keys draft row r of request b attends: the whole (valid) prefix, then the allowed tree columns.
std::vector<int> AttendedKeys(const MlaCase& c, const RequestKeys& keys, int b, int r) {
  std::vector<int> ids;
  for (int j = 0; j < keys.num_prefix; ++j) ids.push_back(j);
  for (int col = 0; col < c.draft_len(b); ++col) {
    if ((!c.problem.is_causal || col <= r) && TreeBit(c, b, r, col)) ids.push_back(keys.num_prefix + col);
  }
  return ids;
}

void LoadQ(const MlaCase& c, int64_t n, int h, double* q) {
  const uint16_t* qrow = c.q.data() + n * c.problem.q_stride_n + h * c.problem.q_stride_h;
  for (int i = 0; i < kMlaKDim; ++i) q[i] = Bf16ToFloat(qrow[i]);
}

// Where one (row, head) writes: offsets into RefOutput's [N, H, 512] and [N, H] arrays.
struct RowHeadAt {
  size_t o, lse;
};
RowHeadAt At(const MlaCase& c, int64_t n, int h) {
  const size_t lse = static_cast<size_t>(n) * c.problem.num_heads + h;
  return {lse * kMlaVDim, lse};
}

// The exact math: o (and o_abs, lse when given) of draft row r (global row n), head h of request b.
void ExactRowHead(const MlaCase& c, const RequestKeys& keys, int b, int r, int h, double* o, double* o_abs,
                  double* lse) {
  const auto& pr = c.problem;
  const int64_t n = c.qo_indptr[b] + r;
  double q[kMlaKDim];
  LoadQ(c, n, h, q);
  const std::vector<int> ids = AttendedKeys(c, keys, b, r);
  if (ids.empty()) return;  // o = 0, lse = -inf, as initialized

  const double sm = pr.sm_scale, prefix_scale = sm * pr.k_scale;
  std::vector<double> s(ids.size());
  double max_score = -std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < ids.size(); ++k) {
    const double scale = ids[k] < keys.num_prefix ? prefix_scale : sm;
    s[k] = scale * Dot(q, keys.rows.data() + static_cast<size_t>(ids[k]) * kMlaKDim);
    max_score = std::max(max_score, s[k]);
  }
  double sum = 0, acc[kMlaVDim] = {}, acc_abs[kMlaVDim] = {};
  for (size_t k = 0; k < ids.size(); ++k) {
    const double w = std::exp(s[k] - max_score);
    const double wv = w * (ids[k] < keys.num_prefix ? static_cast<double>(pr.v_scale) : 1.0);
    const float* v = keys.rows.data() + static_cast<size_t>(ids[k]) * kMlaKDim;
    sum += w;
    for (int i = 0; i < kMlaVDim; ++i) {
      acc[i] += wv * v[i];
      acc_abs[i] += std::fabs(wv * v[i]);
    }
  }
  for (int i = 0; i < kMlaVDim; ++i) {
    o[i] = acc[i] / sum;
    if (o_abs != nullptr) o_abs[i] = acc_abs[i] / sum;
  }
  if (lse != nullptr) *lse = max_score + std::log(sum);
}

// The fp8 numerics (SGLang's Triton fp8 path): prefix scores from q rounded to e4m3, prefix weights
// rounded to e4m3 (relative to the row max) before P.V, the row sum over the unrounded weights.
void Fp8RowHead(const MlaCase& c, const RequestKeys& keys, int b, int r, int h, RefOutput& out) {
  const auto& pr = c.problem;
  const int64_t n = c.qo_indptr[b] + r;
  const RowHeadAt at = At(c, n, h);
  ExactRowHead(c, keys, b, r, h, &out.o_exact[at.o], nullptr, nullptr);
  double q[kMlaKDim], q8[kMlaKDim];
  LoadQ(c, n, h, q);
  for (int i = 0; i < kMlaKDim; ++i) q8[i] = E4m3ToDouble(DoubleToE4m3(q[i]));
  const std::vector<int> ids = AttendedKeys(c, keys, b, r);
  if (ids.empty()) return;

  const double sm = pr.sm_scale, prefix_scale = sm * pr.k_scale, v_scale = pr.v_scale;
  std::vector<double> s(ids.size());
  double max_score = -std::numeric_limits<double>::infinity(), score_abs = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const bool prefix = ids[k] < keys.num_prefix;
    const float* key = keys.rows.data() + static_cast<size_t>(ids[k]) * kMlaKDim;
    s[k] = (prefix ? prefix_scale : sm) * Dot(prefix ? q8 : q, key);
    max_score = std::max(max_score, s[k]);
    if (prefix) {
      double a = 0;
      for (int i = 0; i < kMlaKDim; ++i) a += std::fabs(q8[i] * key[i]);
      score_abs = std::max(score_abs, std::fabs(prefix_scale) * a);
    }
  }
  out.score_abs[at.lse] = score_abs;
  double sum = 0, acc[kMlaVDim] = {}, acc_unrounded[kMlaVDim] = {}, acc_abs[kMlaVDim] = {},
         acc_abs_fp8[kMlaVDim] = {};
  for (size_t k = 0; k < ids.size(); ++k) {
    const bool prefix = ids[k] < keys.num_prefix;
    const double w = std::exp(s[k] - max_score);
    const double scale = prefix ? v_scale : 1.0;
    const double wv = w * scale;
    const double wv_rounded = prefix ? E4m3ToDouble(DoubleToE4m3(w)) * scale : wv;
    const double wv_bound = prefix ? E4m3RoundingErrorBound(w) * scale : 0.0;
    const float* v = keys.rows.data() + static_cast<size_t>(ids[k]) * kMlaKDim;
    sum += w;
    for (int i = 0; i < kMlaVDim; ++i) {
      acc[i] += wv_rounded * v[i];
      acc_unrounded[i] += wv * v[i];
      acc_abs[i] += std::fabs(wv * v[i]);
      acc_abs_fp8[i] += std::fabs(wv_bound * v[i]);
    }
  }
  for (int i = 0; i < kMlaVDim; ++i) {
    out.o[at.o + i] = acc[i] / sum;
    out.o_unrounded_p[at.o + i] = acc_unrounded[i] / sum;
    out.o_abs[at.o + i] = acc_abs[i] / sum;
    out.o_abs_fp8[at.o + i] = acc_abs_fp8[i] / sum;
  }
  out.lse[at.lse] = max_score + std::log(sum);
}

void OneRowHead(const MlaCase& c, const RequestKeys& keys, int b, int r, int h, RefOutput& out) {
  if (UsesFp8Numerics(c.problem)) return Fp8RowHead(c, keys, b, r, h, out);
  const RowHeadAt at = At(c, c.qo_indptr[b] + r, h);
  ExactRowHead(c, keys, b, r, h, &out.o[at.o], &out.o_abs[at.o], &out.lse[at.lse]);
}

}  // namespace

bool UsesFp8Numerics(const kernels::MlaVerifyProblem& p) {
  return p.kv_dtype == kernels::KvDtype::kFp8E4m3 && p.fp8_numerics == kernels::Fp8Numerics::kFp8;
}

RefOutput Reference(const MlaCase& c) {
  const auto& pr = c.problem;
  RefOutput out;
  out.o.assign(static_cast<size_t>(pr.num_q) * pr.num_heads * kMlaVDim, 0.0);
  out.o_abs.assign(out.o.size(), 0.0);
  if (UsesFp8Numerics(pr)) {
    out.o_exact.assign(out.o.size(), 0.0);
    out.o_unrounded_p.assign(out.o.size(), 0.0);
    out.o_abs_fp8.assign(out.o.size(), 0.0);
    out.score_abs.assign(static_cast<size_t>(pr.num_q) * pr.num_heads, 0.0);
  }
  out.lse.assign(static_cast<size_t>(pr.num_q) * pr.num_heads, -std::numeric_limits<double>::infinity());
  const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (int b = 0; b < pr.batch; ++b) {
    if (!RequestValid(c, b)) continue;  // the kernels skip such a request (kMlaErrBadIndptr)
    const RequestKeys keys = GatherKeys(c, b);
    const int pairs = c.draft_len(b) * pr.num_heads;
    std::atomic<int> next{0};
    auto work = [&] {
      for (int i = next++; i < pairs; i = next++) OneRowHead(c, keys, b, i / pr.num_heads, i % pr.num_heads, out);
    };
    std::vector<std::thread> threads;
    for (unsigned t = 1; t < std::min<unsigned>(workers, pairs); ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
  }
  return out;
}

}  // namespace kjit::reference
