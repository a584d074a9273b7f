// Slow, independent re-derivations of the formats for tests: values are built from the format
// definitions in double precision and rounding is a nearest-grid-point search with ties to the
// even code. Nothing here calls src/formats.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace cakemoe {
namespace formats_test {

inline uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

inline float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

/// Value of a sign-less minifloat code: exp bits `e`, mantissa bits `m` of width `mbits`, `bias`.
inline double minifloat_value(uint32_t e, uint32_t m, int mbits, int bias) {
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  return std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mbits), static_cast<int>(e) - bias);
}

/// Sorted positive grid of (value, code); rounding beyond the last point clamps to it.
struct Grid {
  std::vector<std::pair<double, uint32_t>> points;

  /// Nearest grid code of |v|, ties to the even code.
  uint32_t round_magnitude(double v) const {
    if (v >= points.back().first) return points.back().second;
    auto hi = std::upper_bound(
        points.begin(), points.end(), v,
        [](double a, const std::pair<double, uint32_t>& p) { return a < p.first; });
    auto lo = hi - 1;
    if (lo->first == v) return lo->second;
    const double dlo = v - lo->first;
    const double dhi = hi->first - v;
    if (dlo < dhi) return lo->second;
    if (dhi < dlo) return hi->second;
    return (lo->second & 1u) == 0 ? lo->second : hi->second;
  }
};

/// e4m3fn finite magnitudes 0x00..0x7E (satfinite clamps at 448).
inline const Grid& e4m3_grid() {
  static const Grid grid = [] {
    Grid g;
    for (uint32_t c = 0; c <= 0x7E; ++c)
      g.points.push_back({minifloat_value(c >> 3, c & 7, 3, 7), c});
    return g;
  }();
  return grid;
}

/// e2m1 magnitudes 0..7.
inline const Grid& e2m1_grid() {
  static const Grid grid = [] {
    Grid g;
    for (uint32_t c = 0; c <= 7; ++c) g.points.push_back({minifloat_value(c >> 1, c & 1, 1, 1), c});
    return g;
  }();
  return grid;
}

/// fp16 finite magnitudes plus "inf" placed one ulp above the max (IEEE overflow rounding).
inline const Grid& fp16_grid() {
  static const Grid grid = [] {
    Grid g;
    for (uint32_t c = 0; c < 0x7C00; ++c)
      g.points.push_back({minifloat_value(c >> 10, c & 0x3FF, 10, 15), c});
    g.points.push_back({65536.0, 0x7C00});
    return g;
  }();
  return grid;
}

/// bf16 finite magnitudes plus "inf" at 2^128.
inline const Grid& bf16_grid() {
  static const Grid grid = [] {
    Grid g;
    for (uint32_t c = 0; c < 0x7F80; ++c)
      g.points.push_back({minifloat_value(c >> 7, c & 0x7F, 7, 127), c});
    g.points.push_back({std::ldexp(1.0, 128), 0x7F80});
    return g;
  }();
  return grid;
}

/// Signed rounding of a finite-or-infinite non-NaN float onto a grid; sign bit at `sign_bit`.
inline uint32_t round_signed(const Grid& grid, double v, int sign_bit) {
  const uint32_t mag = grid.round_magnitude(std::fabs(v));
  return (std::signbit(v) ? (1u << sign_bit) : 0u) | mag;
}

inline uint8_t ref_e4m3(double v) {
  if (std::isnan(v)) return std::signbit(v) ? 0xFF : 0x7F;
  return static_cast<uint8_t>(round_signed(e4m3_grid(), v, 7));
}

inline uint8_t ref_e2m1(double v) {
  if (std::isnan(v)) return 0x7;
  return static_cast<uint8_t>(round_signed(e2m1_grid(), v, 3));
}

inline double ref_e4m3_value(uint8_t code) {
  if ((code & 0x7F) == 0x7F) return NAN;
  const double mag = minifloat_value((code >> 3) & 0xF, code & 7, 3, 7);
  return (code & 0x80) ? -mag : mag;
}

inline double ref_e2m1_value(uint8_t code) {
  static const double kTable[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8) ? -kTable[code & 7] : kTable[code & 7];
}

/// Smallest c in [0, 254] with 2^(c-127) >= v (v > 2^127 -> 254); NaN -> 255.
inline uint8_t ref_ue8m0_round_up(double v) {
  if (std::isnan(v)) return 255;
  for (int c = 0; c <= 254; ++c) {
    if (std::ldexp(1.0, c - 127) >= v) return static_cast<uint8_t>(c);
  }
  return 254;
}

/// Correctly rounded fp32 operations through double (exact products / double-rounding-safe
/// quotients of floats).
inline float ref_mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * b); }
inline float ref_div(float a, float b) { return static_cast<float>(static_cast<double>(a) / b); }
inline float ref_rcp(float a) { return ref_div(1.0f, a); }

}  // namespace formats_test
}  // namespace cakemoe
