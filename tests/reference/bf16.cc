// bf16 <-> float conversion on bit patterns (the host side of every kernel test).
#include <cstring>

#include "tests/reference/mla_reference.h"

namespace kjit::reference {

float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round half to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace kjit::reference
