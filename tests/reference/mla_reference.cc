// The float64 reference: a direct transcription of KERNEL.md's formula, one (row, head) at a time.
#include "tests/reference/mla_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kjit::reference {
namespace {

using kernels::kMlaKDim;
using kernels::kMlaVDim;

struct Key {
  const uint16_t* row;  // 576 bf16 values; V is the first 512
  double score_scale;   // sm_scale * k_scale (prefix) or sm_scale (tree)
  double v_scale;       // v_scale (prefix) or 1 (tree)
};

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

}  // namespace

RefOutput Reference(const MlaCase& c) {
  const auto& pr = c.problem;
  const int h_count = pr.num_heads;
  RefOutput out;
  out.o.assign(static_cast<size_t>(pr.num_q) * h_count * kMlaVDim, 0.0);
  out.o_abs.assign(out.o.size(), 0.0);
  out.lse.assign(static_cast<size_t>(pr.num_q) * h_count, -std::numeric_limits<double>::infinity());

  std::vector<double> q(kMlaKDim), scores, acc(kMlaVDim), acc_abs(kMlaVDim);
  std::vector<Key> keys;
  for (int b = 0; b < pr.batch; ++b) {
    if (!RequestValid(c, b)) continue;  // the kernels skip such a request (kMlaErrBadIndptr)
    const int p = c.prefix_len(b), d = c.draft_len(b), row0 = c.qo_indptr[b];
    for (int r = 0; r < d; ++r) {
      keys.clear();
      for (int j = 0; j < p; ++j) {
        const int64_t slot = c.kv_indices[c.kv_indptr[b] + j];
        if (slot < 0 || slot >= pr.num_slots) continue;  // never dereferenced: masked
        keys.push_back({c.kv_cache.data() + slot * kMlaKDim,
                        static_cast<double>(pr.sm_scale) * pr.k_scale, static_cast<double>(pr.v_scale)});
      }
      for (int col = 0; col < d; ++col) {
        if (pr.is_causal && col > r) continue;
        if (!TreeBit(c, b, r, col)) continue;
        keys.push_back({c.k_extend.data() + (row0 + col) * pr.k_extend_stride_n,
                        static_cast<double>(pr.sm_scale), 1.0});
      }
      for (int h = 0; h < h_count; ++h) {
        const uint16_t* qrow = c.q.data() + (row0 + r) * pr.q_stride_n + h * pr.q_stride_h;
        for (int i = 0; i < kMlaKDim; ++i) q[i] = Bf16ToFloat(qrow[i]);
        scores.assign(keys.size(), 0.0);
        double max_score = -std::numeric_limits<double>::infinity();
        for (size_t k = 0; k < keys.size(); ++k) {
          double dot = 0;
          for (int i = 0; i < kMlaKDim; ++i) dot += q[i] * Bf16ToFloat(keys[k].row[i]);
          scores[k] = keys[k].score_scale * dot;
          max_score = std::max(max_score, scores[k]);
        }
        if (keys.empty()) continue;  // zeros and -inf, as initialized
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        std::fill(acc_abs.begin(), acc_abs.end(), 0.0);
        for (size_t k = 0; k < keys.size(); ++k) {
          const double w = std::exp(scores[k] - max_score);
          sum += w;
          for (int i = 0; i < kMlaVDim; ++i) {
            const double v = keys[k].v_scale * Bf16ToFloat(keys[k].row[i]);
            acc[i] += w * v;
            acc_abs[i] += w * std::fabs(v);
          }
        }
        const size_t base = (static_cast<size_t>(row0 + r) * h_count + h) * kMlaVDim;
        for (int i = 0; i < kMlaVDim; ++i) {
          out.o[base + i] = acc[i] / sum;
          out.o_abs[base + i] = acc_abs[i] / sum;
        }
        out.lse[static_cast<size_t>(row0 + r) * h_count + h] = max_score + std::log(sum);
      }
    }
  }
  return out;
}

}  // namespace kjit::reference
