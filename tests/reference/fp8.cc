// OCP e4m3 ("float8_e4m3fn") <-> double on byte values: the host side of an fp8 cache's tests.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/reference/mla_reference.h"

namespace kjit::reference {

double E4m3ToDouble(uint8_t byte) {
  const int exponent = (byte >> 3) & 0xf, mantissa = byte & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, exponent - 10);  // m/8 * 2^-6, 1.m * 2^(e-7)
  return (byte & 0x80) ? -magnitude : magnitude;
}

uint8_t DoubleToE4m3(double x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7f;
  const double a = std::fabs(x);
  if (a >= 448.0) return sign | 0x7e;  // satfinite (RNE keeps everything up to 464 at 448 anyway)
  int binade = -6;                     // the subnormals share the smallest normal binade's quantum
  if (a >= 0x1p-6) {
    int e = 0;
    std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
    binade = e - 1;
  }
  // a / quantum is exact (a power-of-two scaling); nearbyint rounds half to even in the default mode.
  int n = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - binade)));  // in [0, 16]
  if (n < 8) return sign | static_cast<uint8_t>(n);  // zero or a subnormal (binade -6 only)
  if (n == 16) n = 8, ++binade;                       // rounded up into the next binade
  return sign | static_cast<uint8_t>(((binade + 7) << 3) | (n - 8));
}

double E4m3RoundingErrorBound(double a) { return std::min(a, std::max(a * 0x1p-4, 0x1p-10)); }

uint8_t FiniteE4m3Code(int i) { return static_cast<uint8_t>(i < 0x7f ? i : i + 1); }

}  // namespace kjit::reference
