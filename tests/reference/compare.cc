// Kernel output vs the float64 reference: a per-element bound tied to bf16 (and to e4m3 for the
// weights of fp8 numerics) plus global norm checks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "tests/reference/mla_reference.h"

namespace kjit::reference {
namespace {

double RelFrobenius(double err2, double ref2) {
  if (ref2 > 0) return std::sqrt(err2 / ref2);
  return err2 == 0 ? 0 : std::numeric_limits<double>::infinity();
}

}  // namespace

Comparison Compare(const MlaCase& c, const RefOutput& want, const std::vector<uint16_t>& o_bf16,
                   const std::vector<float>& lse, const Tolerance& tol) {
  const auto& pr = c.problem;
  const int h_count = pr.num_heads;
  Comparison cmp;
  cmp.num_heads = h_count;
  const bool fp8 = UsesFp8Numerics(pr) && want.o_exact.size() == want.o.size() &&
                   want.o_unrounded_p.size() == want.o.size() && want.o_abs_fp8.size() == want.o.size();
  const bool mma_acc = fp8 && tol.e4m3_mma_accumulation > 0 && want.score_abs.size() == want.lse.size();
  double err2 = 0, want2 = 0, worst_ratio = -1;
  double exact_err2 = 0, exact2 = 0, numerics_err2 = 0, p_rounding2 = 0;
  for (int64_t n = 0; n < pr.num_q; ++n) {
    if (n < static_cast<int64_t>(c.row_is_padding.size()) && c.row_is_padding[n]) continue;
    for (int h = 0; h < h_count; ++h) {
      // e4m3 MMAs' score error (Tolerance::e4m3_mma_accumulation): delta in lse, e^(2 delta) - 1 in each weight.
      const double delta = mma_acc ? tol.e4m3_mma_accumulation * want.score_abs[n * h_count + h] : 0.0;
      const double weight_rtol = std::expm1(2 * delta);
      for (int i = 0; i < kernels::kMlaVDim; ++i) {
        const int64_t at = n * pr.o_stride_n + h * pr.o_stride_h + i;
        const int64_t flat = (n * h_count + h) * kernels::kMlaVDim + i;
        const double got = at < static_cast<int64_t>(o_bf16.size())
                               ? Bf16ToFloat(o_bf16[at])
                               : std::numeric_limits<double>::quiet_NaN();
        const double w = want.o[flat];
        const double bound = tol.atol + tol.rtol_out * std::fabs(w) + tol.rtol_p * want.o_abs[flat] +
                             (fp8 ? tol.rtol_p_fp8 * want.o_abs_fp8[flat] : 0.0) + weight_rtol * want.o_abs[flat];
        const double exact = fp8 ? want.o_exact[flat] : w;
        ++cmp.compared;
        want2 += w * w;
        exact2 += exact * exact;
        numerics_err2 += (w - exact) * (w - exact);
        if (fp8) p_rounding2 += (w - want.o_unrounded_p[flat]) * (w - want.o_unrounded_p[flat]);
        if (!std::isfinite(got)) {
          ++cmp.nan_count;
          ++cmp.bad_elements;
          if (worst_ratio < std::numeric_limits<double>::infinity()) {
            worst_ratio = std::numeric_limits<double>::infinity();
            cmp.worst_index = flat, cmp.worst_got = got, cmp.worst_want = w, cmp.worst_bound = bound;
          }
          err2 = exact_err2 = std::numeric_limits<double>::infinity();
          continue;
        }
        const double err = std::fabs(got - w);
        err2 += err * err;
        exact_err2 += (got - exact) * (got - exact);
        cmp.max_abs_err = std::max(cmp.max_abs_err, err);
        if (err > bound) ++cmp.bad_elements;
        if (err / bound > worst_ratio) {
          worst_ratio = err / bound;
          cmp.worst_index = flat, cmp.worst_got = got, cmp.worst_want = w, cmp.worst_bound = bound;
        }
      }
      if (lse.empty()) continue;
      const int64_t li = n * h_count + h;
      const double got = li < static_cast<int64_t>(lse.size()) ? lse[li] : std::nan("");
      const double w = want.lse[li];
      double err;
      if (std::isinf(w) && w < 0) {
        err = (std::isinf(got) && got < 0) ? 0 : std::numeric_limits<double>::infinity();
        if (std::isnan(got)) ++cmp.nan_count;
      } else if (!std::isfinite(got)) {
        ++cmp.nan_count;
        err = std::numeric_limits<double>::infinity();
      } else {
        err = std::fabs(got - w);
      }
      if (err > tol.lse_atol + tol.lse_rtol * (std::isfinite(w) ? std::fabs(w) : 0.0) + delta) ++cmp.lse_bad;
      if (err > cmp.lse_max_abs_err || cmp.lse_worst_index < 0) {
        cmp.lse_max_abs_err = std::max(cmp.lse_max_abs_err, err);
        cmp.lse_worst_index = li;
      }
    }
  }
  cmp.rel_frobenius = RelFrobenius(err2, want2);
  cmp.rel_frobenius_exact = RelFrobenius(exact_err2, exact2);
  cmp.numerics_rel_frobenius = RelFrobenius(numerics_err2, exact2);
  cmp.p_rounding_rel_frobenius = RelFrobenius(p_rounding2, want2);
  cmp.max_rel_frob = 2 * cmp.p_rounding_rel_frobenius + tol.max_rel_frob;
  return cmp;
}

std::string Comparison::Describe() const {
  std::ostringstream s;
  s.precision(6);
  s << "compared " << compared << " elements of o: rel_frobenius " << rel_frobenius << " (limit "
    << max_rel_frob << "), max_abs_err " << max_abs_err << ", over bound " << bad_elements
    << ", non-finite " << nan_count << "\n";
  if (numerics_rel_frobenius > 0 || rel_frobenius_exact != rel_frobenius) {
    s << "against the exact math: rel_frobenius " << rel_frobenius_exact << " (the fp8 numerics' emulation "
      << "measures " << numerics_rel_frobenius << " there); rounding P to e4m3 moves the emulation by "
      << p_rounding_rel_frobenius << "\n";
  }
  if (worst_index >= 0) {
    const int64_t dim = worst_index % kernels::kMlaVDim;
    const int64_t head = num_heads > 0 ? (worst_index / kernels::kMlaVDim) % num_heads : 0;
    const int64_t row = num_heads > 0 ? worst_index / kernels::kMlaVDim / num_heads : 0;
    s << "worst element o[row " << row << ", head " << head << ", dim " << dim << "] (flat "
      << worst_index << "): got " << worst_got << ", want " << worst_want << ", |err| "
      << std::fabs(worst_got - worst_want) << ", bound " << worst_bound << "\n";
  }
  s << "lse: max_abs_err " << lse_max_abs_err << ", over bound " << lse_bad;
  if (lse_worst_index >= 0 && num_heads > 0) {
    s << ", worst at [row " << lse_worst_index / num_heads << ", head " << lse_worst_index % num_heads
      << "]";
  }
  return s.str();
}

}  // namespace kjit::reference
