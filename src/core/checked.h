// Overflow-checked size arithmetic. Every size product or sum derived from caller input goes
// through these, so a hostile dimension gives a typed error naming the argument instead of a
// wrapped size (signed overflow is undefined behaviour; a wrapped size under-allocates).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "cakemoe/errors.h"

namespace cakemoe {
namespace core {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

/// a * b, or InvalidArgument(arg, "<what> overflows int64") when it does not fit.
inline int64_t checked_mul(int64_t a, int64_t b, const std::string& arg,
                           const std::string& what = "a derived size") {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw InvalidArgument(
        arg, what + " overflows int64 (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  }
  return r;
}

/// a + b, or InvalidArgument(arg, "<what> overflows int64").
inline int64_t checked_add(int64_t a, int64_t b, const std::string& arg,
                           const std::string& what = "a derived size") {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw InvalidArgument(
        arg, what + " overflows int64 (" + std::to_string(a) + " + " + std::to_string(b) + ")");
  }
  return r;
}

/// The product of `factors`, each multiplication checked.
inline int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& arg,
                               const std::string& what = "a derived size") {
  int64_t r = 1;
  for (int64_t f : factors) r = checked_mul(r, f, arg, what);
  return r;
}

/// Throws InvalidArgument(arg, "<what> = v must lie in [lo, hi]") unless lo <= v <= hi.
inline void require_in_range(int64_t v, int64_t lo, int64_t hi, const std::string& arg,
                             const std::string& what) {
  if (v < lo || v > hi) {
    throw InvalidArgument(arg, what + " must lie in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "], got " + std::to_string(v));
  }
}

/// The smallest power of two >= v, for 1 <= v <= `cap` (a power of two); `cap` above it. The cap
/// keeps the loop finite and the result in range for any v.
constexpr int64_t next_pow2_capped(int64_t v, int64_t cap) {
  int64_t p = 1;
  while (p < v && p < cap) p <<= 1;
  return p;
}

}  // namespace core
}  // namespace cakemoe
