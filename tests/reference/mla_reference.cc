// The float64 reference: a direct transcription of KERNEL.md's formula, one (row, head) at a time.
// Keys are widened once per request (bf16 -> float is exact, and float * float is exact in double),
// and the independent (row, head) pairs are spread over threads: each pair is computed sequentially
// by one thread into its own outputs, so the result does not depend on the thread count.
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
  std::vector<const uint16_t*> src;
  for (int j = 0; j < c.prefix_len(b); ++j) {
    const int64_t slot = c.kv_indices[c.kv_indptr[b] + j];
    if (slot >= 0 && slot < pr.num_slots) src.push_back(c.kv_cache.data() + slot * kMlaKDim);  // else masked
  }
  k.num_prefix = static_cast<int>(src.size());
  for (int col = 0; col < c.draft_len(b); ++col) {
    src.push_back(c.k_extend.data() + (c.qo_indptr[b] + col) * pr.k_extend_stride_n);
  }
  k.rows.resize(src.size() * kMlaKDim);
  for (size_t i = 0; i < src.size(); ++i)
    for (int e = 0; e < kMlaKDim; ++e) k.rows[i * kMlaKDim + e] = Bf16ToFloat(src[i][e]);
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

// o, o_abs and lse of draft row r (global row n), head h of request b.
void OneRowHead(const MlaCase& c, const RequestKeys& keys, int b, int r, int h, RefOutput& out) {
  const auto& pr = c.problem;
  const int64_t n = c.qo_indptr[b] + r;
  double q[kMlaKDim];
  const uint16_t* qrow = c.q.data() + n * pr.q_stride_n + h * pr.q_stride_h;
  for (int i = 0; i < kMlaKDim; ++i) q[i] = Bf16ToFloat(qrow[i]);

  std::vector<int> ids;  // attended keys: the whole (valid) prefix, then the allowed tree columns
  for (int j = 0; j < keys.num_prefix; ++j) ids.push_back(j);
  for (int col = 0; col < c.draft_len(b); ++col) {
    if ((!pr.is_causal || col <= r) && TreeBit(c, b, r, col)) ids.push_back(keys.num_prefix + col);
  }
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
  const size_t base = (static_cast<size_t>(n) * pr.num_heads + h) * kMlaVDim;
  for (int i = 0; i < kMlaVDim; ++i) {
    out.o[base + i] = acc[i] / sum;
    out.o_abs[base + i] = acc_abs[i] / sum;
  }
  out.lse[static_cast<size_t>(n) * pr.num_heads + h] = max_score + std::log(sum);
}

}  // namespace

RefOutput Reference(const MlaCase& c) {
  const auto& pr = c.problem;
  RefOutput out;
  out.o.assign(static_cast<size_t>(pr.num_q) * pr.num_heads * kMlaVDim, 0.0);
  out.o_abs.assign(out.o.size(), 0.0);
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
