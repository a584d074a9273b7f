// Exact fp32 decode tables for the reference GEMM readers (e2m1 codes, e4m3 bytes), built once
// from the formats codecs so the hot loops are table lookups.
#pragma once

#include <array>
#include <cstdint>

#include "formats/codecs.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

/// fp32 value of each 4-bit e2m1 code.
inline const float* e2m1_table() {
  static const std::array<float, 16> table = [] {
    std::array<float, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = formats::e2m1_to_float(static_cast<uint8_t>(i));
    return t;
  }();
  return table.data();
}

/// fp32 value of each e4m3 byte (0x7F / 0xFF are NaN).
inline const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = formats::e4m3_to_float(static_cast<uint8_t>(i));
    return t;
  }();
  return table.data();
}

/// 16 values of one NVFP4 block in accumulator units: e2m1 * sf (exact in fp32).
inline void unpack_nvfp4_block16(const uint8_t* packed8, float sf, const float* e2m1,
                                 float* out16) {
  for (int i = 0; i < 8; ++i) {
    out16[2 * i] = e2m1[packed8[i] & 0xF] * sf;
    out16[2 * i + 1] = e2m1[packed8[i] >> 4] * sf;
  }
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
