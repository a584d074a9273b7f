// Reads fuzzer bytes as typed values. Every read succeeds: past the end it returns zeros, which
// decode to the "natural" (valid-ish) choice everywhere, so a short input is a valid-ish call.
// The encodings bias toward values that break size arithmetic (0, -1, 2^31, 2^63 - 1, ...).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace cakemoe {
namespace fuzz {

/// Wrapping arithmetic for the fuzzer's own size guesses (it must not have overflow UB itself).
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
/// a * b, or INT64_MAX when the product of two non-negative values does not fit (or one is < 0).
inline int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return INT64_MAX;
  return r;
}

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t consumed() const { return pos_; }

  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool flag() { return (byte() & 1) != 0; }
  uint64_t raw64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(byte()) << (8 * i);
    return v;
  }
  uint32_t raw32() { return static_cast<uint32_t>(raw64() & 0xFFFFFFFFu); }

  /// Tag byte b: [0x00, 0xA0) b itself; [0xA0, 0xB0) (b - 0x9F) * 64; [0xB0, 0xC0) a 20-bit
  /// value (low nibble of b over the next two bytes); [0xC0, 0xE0) one of kSpecialDims;
  /// [0xE0, 0xFF] the next 8 bytes as a raw int64.
  int64_t dim() {
    const uint8_t b = byte();
    if (b < 0xA0) return b;
    if (b < 0xB0) return (b - 0x9F) * 64;
    if (b < 0xC0) {
      const int64_t lo = byte();
      const int64_t hi = byte();
      return ((b & 0xF) << 16) | (hi << 8) | lo;
    }
    if (b < 0xE0) return kSpecialDims[b - 0xC0];
    return static_cast<int64_t>(raw64());
  }
  int dim32() { return static_cast<int>(dim()); }

  /// Tag byte b: [0x00, 0x80) b / 8; [0x80, 0xA0) one of the special values below; [0xA0, 0xFF]
  /// the next 8 bytes as a raw double.
  double scalar() {
    const uint8_t b = byte();
    if (b < 0x80) return b / 8.0;
    if (b < 0xA0) return special_double(b - 0x80);
    const uint64_t bits = raw64();
    double v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
  /// As scalar(), but float specials and raw 4-byte floats (no double -> float narrowing, which
  /// is undefined out of float's range).
  float scalar_f() {
    const uint8_t b = byte();
    if (b < 0x80) return b / 8.0f;
    if (b < 0xA0) return special_float(b - 0x80);
    const uint32_t bits = raw32();
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }

  /// Short string: a length byte (mod 33) then that many bytes.
  std::string text() {
    const int n = byte() % 33;
    std::string s;
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(byte()));
    return s;
  }

  /// Any value of a uint8-based enum, out-of-range ones included.
  template <typename Enum>
  Enum any_enum() {
    return static_cast<Enum>(byte());
  }
  /// Mostly a valid enumerator: b < 0xF0 picks b % count, else the next byte verbatim.
  template <typename Enum>
  Enum pick_enum(int count) {
    const uint8_t b = byte();
    return static_cast<Enum>(b < 0xF0 ? b % count : byte());
  }

 private:
  // clang-format off
  static constexpr int64_t kSpecialDims[32] = {
      0, -1, -2, -64,
      INT32_MAX, int64_t{1} << 31, INT32_MIN, UINT32_MAX,
      int64_t{1} << 32, (int64_t{1} << 32) + 1, 65535, 65536,
      int64_t{1} << 40, int64_t{1} << 48, int64_t{1} << 53, int64_t{1} << 62,
      INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1,
      -65536, int64_t{1} << 30, int64_t{3} << 30, int64_t{1} << 20,
      int64_t{1} << 24, int64_t{1} << 46, int64_t{1} << 57, int64_t{1} << 61,
      -(int64_t{1} << 40), INT64_MAX / 3 + 1, 46341 /* its square passes INT32_MAX */,
      int64_t{1} << 28};

  static double special_double(int i) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    const double table[32] = {
        std::nan(""), -std::nan(""), inf, -inf,
        -0.0, 0.0, -1.0, 1.0 / 2688.0,
        448.0, 6.0, 2688.0, DBL_MAX,
        -DBL_MAX, DBL_MIN, std::numeric_limits<double>::denorm_min(), FLT_MAX,
        2.0 * FLT_MAX, -2.0 * FLT_MAX, 1e-45, 1e-300,
        1e300, 2147483648.0, -2147483648.0, 9223372036854775808.0,
        18446744073709551616.0, -9223372036854775808.0, 1e10, 1e-10,
        0.1, 65504.0, 1e38, 7.0};
    return table[i];
  }
  static float special_float(int i) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    const float table[32] = {
        std::nanf(""), -std::nanf(""), inf, -inf,
        -0.0f, 0.0f, -1.0f, 1.0f / 2688.0f,
        448.0f, 6.0f, 2688.0f, FLT_MAX,
        -FLT_MAX, FLT_MIN, std::numeric_limits<float>::denorm_min(), 1e30f,
        -1e30f, 3e38f, 1e-45f, 1e-38f,
        65504.0f, 2147483648.0f, -2147483648.0f, 9.3e18f,
        1.9e19f, -9.3e18f, 1e10f, 1e-10f,
        0.1f, 0.5f, 1e38f, 7.0f};
    return table[i];
  }
  // clang-format on

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace fuzz
}  // namespace cakemoe
