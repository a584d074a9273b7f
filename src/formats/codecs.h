// Scalar number-format codecs (spec stepfun §4.1): bf16, fp16, e4m3, ue8m0, e2m1.
// Header-only and valid in host and device code. Every encoder is pure integer arithmetic on the
// fp32 bit pattern, so host and device produce identical bits by construction; the only float
// operations are the *_rn helpers below, which are IEEE-correctly rounded on both sides.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/macros.h"

namespace cakemoe {
namespace formats {

// ---- Bit casts ----------------------------------------------------------------------------------

CAKEMOE_HD uint32_t float_to_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}

CAKEMOE_HD float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

// ---- Correctly rounded arithmetic (identical bits on host and device) ---------------------------
// NOTE: device intrinsics are used so nvcc never contracts a*b+c into an fma; host code is built
// with -ffp-contract=off. Device code calling these must not be built with -ftz / fast math.

/// Correctly rounded 1/x. DECISION (docs/decisions/formats.md): every "approx_rcp" of the spec.
CAKEMOE_HD float rcp_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __frcp_rn(x);
#else
  return 1.0f / x;
#endif
}

CAKEMOE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

CAKEMOE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

CAKEMOE_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// |x| by clearing the sign bit (no libm call, same on both sides).
CAKEMOE_HD float abs_bits(float x) { return bits_to_float(float_to_bits(x) & 0x7FFFFFFFu); }

/// max(a, b) where a NaN operand is ignored (fmaxf semantics), written without libm.
CAKEMOE_HD float max_ignore_nan(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  return a > b ? a : b;
}

// ---- Internal: round-to-nearest-even right shift of an unsigned integer -------------------------

/// value >> shift rounded to nearest, ties to even (shift in [1, 31]).
CAKEMOE_HD uint32_t shift_right_rne(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

// ---- bf16 ---------------------------------------------------------------------------------------

/// fp32 -> bf16, RNE; overflow -> inf; NaN -> quiet NaN keeping sign and top payload bits.
CAKEMOE_HD uint16_t bf16_from_float(float x) {
  const uint32_t bits = float_to_bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Same exponent range as fp32: rounding the low 16 bits is RNE for normals and subnormals,
  // and the carry turns the largest values into inf.
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

CAKEMOE_HD float bf16_to_float(uint16_t bits) { return bits_to_float(uint32_t(bits) << 16); }

// ---- fp16 (IEEE binary16) -----------------------------------------------------------------------

/// fp32 -> fp16, RNE incl. subnormals; overflow -> inf; NaN -> quiet NaN keeping sign and the top
/// 9 payload bits.
CAKEMOE_HD uint16_t fp16_from_float(float x) {
  const uint32_t bits = float_to_bits(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  if (abs >= 0x38800000u) {  // fp16 normal range (>= 2^-14) or above
    if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
    const uint32_t rebased = abs - (112u << 23);  // fp32 bias 127 -> fp16 bias 15
    return static_cast<uint16_t>(sign | shift_right_rne(rebased, 13));
  }
  const int exp = static_cast<int>(abs >> 23);
  if (exp < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  // Subnormal result in units of 2^-24: mantissa (with hidden bit) >> (126 - exp), shift 14..24.
  const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
  return static_cast<uint16_t>(sign | shift_right_rne(mant, 126 - exp));
}

CAKEMOE_HD float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_to_float(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
  // Subnormal or zero: mant * 2^-24 is exact in fp32.
  const float magnitude = static_cast<float>(mant) * bits_to_float(0x33800000u);  // 2^-24
  return bits_to_float(sign | float_to_bits(magnitude));
}

// ---- e4m3 (float8_e4m3fn: bias 7, no inf, NaN = S.1111.111, max 448) ----------------------------

constexpr float kE4m3Max = 448.0f;

/// fp32 -> e4m3, RNE, satfinite (|x| > 448 and ±inf -> ±448); NaN -> 0x7F | sign.
CAKEMOE_HD uint8_t e4m3_from_float(float x) {
  const uint32_t bits = float_to_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  if (abs >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // >= 448 (incl. inf)
  if (abs >= 0x3C800000u) {  // e4m3 normal range (>= 2^-6); rounding stays <= 448 = 0x7E
    const uint32_t rebased = abs - (120u << 23);  // fp32 bias 127 -> e4m3 bias 7
    return static_cast<uint8_t>(sign | shift_right_rne(rebased, 20));
  }
  const int exp = static_cast<int>(abs >> 23);
  if (exp < 117) return static_cast<uint8_t>(sign);  // below 2^-10: rounds to zero
  // Subnormal result in units of 2^-9 (may carry into the smallest normal, code 0x08).
  const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
  return static_cast<uint8_t>(sign | shift_right_rne(mant, 141 - exp));
}

/// e4m3 -> fp32 (exact); codes 0x7F / 0xFF -> NaN.
CAKEMOE_HD float e4m3_to_float(uint8_t code) {
  const uint32_t sign = uint32_t(code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xFu;
  const uint32_t mant = code & 0x7u;
  if (exp == 0xFu && mant == 0x7u) return bits_to_float(sign | 0x7FC00000u);
  if (exp != 0) return bits_to_float(sign | ((exp + 120u) << 23) | (mant << 20));
  const float magnitude = static_cast<float>(mant) * bits_to_float(0x3B000000u);  // 2^-9
  return bits_to_float(sign | float_to_bits(magnitude));
}

// ---- ue8m0 (unsigned power-of-two scale: 2^(code-127), 0xFF = NaN) ------------------------------

/// Smallest 2^(c-127) >= x, satfinite (c <= 254); x <= 2^-127 (incl. x <= 0) -> 0; NaN -> 0xFF.
CAKEMOE_HD uint8_t ue8m0_from_float_round_up(float x) {
  const uint32_t bits = float_to_bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFu;
  if (bits & 0x80000000u) return 0;  // negative or -0
  const uint32_t exp = bits >> 23;
  const uint32_t mant = bits & 0x7FFFFFu;
  if (exp == 0) return mant > 0x400000u ? 1 : 0;  // fp32 subnormal: compare with 2^-127
  const uint32_t code = exp + (mant != 0 ? 1u : 0u);
  return static_cast<uint8_t>(code > 254u ? 254u : code);
}

/// 2^(code-127) exactly (code 0 = 2^-127, an fp32 subnormal); 0xFF -> NaN.
CAKEMOE_HD float ue8m0_to_float(uint8_t code) {
  if (code == 0xFFu) return bits_to_float(0x7FC00000u);
  if (code == 0) return bits_to_float(0x00400000u);
  return bits_to_float(uint32_t(code) << 23);
}

// ---- e2m1 (fp4: sign<<3 | magnitude code; magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}) ---------------

constexpr float kE2m1Max = 6.0f;

/// fp32 -> 4-bit e2m1 code, RNE, satfinite ±6. Sign is kept (tiny negatives give 0x8 = -0).
/// NOTE: NaN -> +6 (0x7), following cvt.rn.satfinite.e2m1x2.f32 / cuda_fp4.h ("NaN input
/// values result in positive MAXNORM"); see docs/decisions/formats.md.
CAKEMOE_HD uint8_t e2m1_from_float(float x) {
  const uint32_t bits = float_to_bits(x);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0x7u;
  const uint8_t sign = static_cast<uint8_t>((bits >> 28) & 0x8u);
  const float a = bits_to_float(abs);
  // Decision points are the midpoints; at a tie the even code (mantissa bit 0) wins.
  uint8_t mag;
  if (a <= 0.25f) mag = 0;
  else if (a < 0.75f) mag = 1;
  else if (a <= 1.25f) mag = 2;
  else if (a < 1.75f) mag = 3;
  else if (a <= 2.5f) mag = 4;
  else if (a < 3.5f) mag = 5;
  else if (a <= 5.0f) mag = 6;
  else mag = 7;
  return static_cast<uint8_t>(sign | mag);
}

/// 4-bit e2m1 code (low nibble of `code`) -> fp32 (exact).
CAKEMOE_HD float e2m1_to_float(uint8_t code) {
  const uint32_t mag = code & 0x7u;
  // Magnitude code (exp << 1) | mant: exp 0 is subnormal (0, 0.5), else 2^(exp-1) * (1 + mant/2).
  const uint32_t exp = mag >> 1;
  const uint32_t mant = mag & 1u;
  const uint32_t abs = exp == 0 ? (mant ? 0x3F000000u : 0u) : (((exp + 126u) << 23) | (mant << 22));
  return bits_to_float((uint32_t(code & 0x8u) << 28) | abs);
}

/// Packs two e2m1 codes: element 2i in the low nibble, element 2i+1 in the high nibble.
CAKEMOE_HD uint8_t e2m1x2_pack(uint8_t lo_code, uint8_t hi_code) {
  return static_cast<uint8_t>((lo_code & 0xFu) | ((hi_code & 0xFu) << 4));
}

/// Element `index` (0 = low nibble) of a packed e2m1 byte.
CAKEMOE_HD uint8_t e2m1x2_unpack(uint8_t packed, int index) {
  return static_cast<uint8_t>(index == 0 ? (packed & 0xFu) : (packed >> 4));
}

}  // namespace formats
}  // namespace cakemoe
