// Packed conversions and arithmetic for register dequantization (sm_89+ cvt, f16x2 math), on raw
// 32-bit registers so callers need no half-precision types.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace cakemoe {
namespace ptx {

/// Two e4m3 bytes (low byte -> low half) to f16x2; exact (every e4m3 value is an f16).
CAKEMOE_DEVICE uint32_t cvt_e4m3x2_f16x2(uint16_t bytes) {
  uint32_t out;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(out) : "h"(bytes));
  return out;
}

/// Lane-wise f16 product, round to nearest even; subnormals kept (no .ftz).
CAKEMOE_DEVICE uint32_t mul_f16x2(uint32_t a, uint32_t b) {
  uint32_t out;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(out) : "r"(a), "r"(b));
  return out;
}

}  // namespace ptx
}  // namespace cakemoe
