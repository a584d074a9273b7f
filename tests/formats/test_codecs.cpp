// Exhaustive and randomized checks of the scalar codecs against tests/formats/slow_reference.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "formats/codecs.h"
#include "slow_reference.h"

namespace cakemoe {
namespace formats {
namespace {

using formats_test::bits_of;
using formats_test::float_of;

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

bool same_bits(float a, float b) { return bits_of(a) == bits_of(b); }

/// Float probes: a stride over every positive bit pattern, random patterns, and the midpoints and
/// float neighbours of every point of `grid` (both signs).
std::vector<float> probes(const formats_test::Grid& grid, uint64_t seed, int random_count) {
  std::vector<float> out;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  while (static_cast<int>(out.size()) < random_count) {
    const float x = float_of(rng() & 0x7FFFFFFFu);
    if (!std::isnan(x)) out.push_back(x);  // NaN handling has its own tests
  }
  for (uint32_t b = 0; b < 0x7F800000u; b += 4099u) out.push_back(float_of(b));
  for (size_t i = 0; i + 1 < grid.points.size(); ++i) {
    const float mid = static_cast<float>((grid.points[i].first + grid.points[i + 1].first) / 2);
    const float point = static_cast<float>(grid.points[i].first);
    for (float v : {mid, point}) {
      out.push_back(v);
      out.push_back(std::nextafter(v, 0.0f));
      out.push_back(std::nextafter(v, kInf));
    }
  }
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) out.push_back(-out[i]);
  out.push_back(kInf);
  out.push_back(-kInf);
  return out;
}

// ---- e4m3 ---------------------------------------------------------------------------------------

TEST(E4m3, DecodeAllCodesMatchesFormula) {
  for (int c = 0; c < 256; ++c) {
    const float got = e4m3_to_float(static_cast<uint8_t>(c));
    const double want = formats_test::ref_e4m3_value(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;
    }
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
}

TEST(E4m3, AllCodesRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(e4m3_from_float(e4m3_to_float(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(E4m3, TiesSaturationNaNSubnormals) {
  EXPECT_EQ(e4m3_from_float(17.0f), 0x58);     // 16 | 18: tie -> 16 (even mantissa 0)
  EXPECT_EQ(e4m3_from_float(19.0f), 0x5A);     // 18 | 20: tie -> 20 (mantissa 2)
  EXPECT_EQ(e4m3_from_float(1.0625f), 0x38);   // 1 | 1.125: tie -> 1
  EXPECT_EQ(e4m3_from_float(-1.1875f), 0xBA);  // -(1.125 | 1.25): tie -> -1.25 (mantissa 2)
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7E);    // tie 448 | 480 would pick 480: satfinite 448
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7E);
  EXPECT_EQ(e4m3_from_float(-1e30f), 0xFE);
  EXPECT_EQ(e4m3_from_float(kInf), 0x7E);
  EXPECT_EQ(e4m3_from_float(-kInf), 0xFE);
  EXPECT_EQ(e4m3_from_float(kNaN), 0x7F);
  EXPECT_EQ(e4m3_from_float(-kNaN), 0xFF);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);  // half the min subnormal: tie -> 0
  EXPECT_EQ(e4m3_from_float(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(e4m3_from_float(3 * std::ldexp(1.0f, -10)), 0x02);   // 1 | 2 (x 2^-9): tie -> 2
  EXPECT_EQ(e4m3_from_float(15 * std::ldexp(1.0f, -10)), 0x08);  // 7 | 8: tie -> 8 = min normal
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_float(1e-45f), 0x00);  // fp32 subnormal
}

TEST(E4m3, MatchesNearestGridSearch) {
  for (float x : probes(formats_test::e4m3_grid(), 11, 200000)) {
    ASSERT_EQ(e4m3_from_float(x), formats_test::ref_e4m3(x)) << "x = " << x;
  }
}

// ---- e2m1 ---------------------------------------------------------------------------------------

TEST(E2m1, DecodeAll16Codes) {
  const float table[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int c = 0; c < 16; ++c) {
    const float want = (c & 8) ? -table[c & 7] : table[c & 7];
    EXPECT_TRUE(same_bits(e2m1_to_float(static_cast<uint8_t>(c)), want)) << "code " << c;
    EXPECT_EQ(e2m1_from_float(e2m1_to_float(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(E2m1, TiesSaturationNaN) {
  // Midpoints go to the even code (mantissa bit 0).
  EXPECT_EQ(e2m1_from_float(0.25f), 0x0);
  EXPECT_EQ(e2m1_from_float(0.75f), 0x2);
  EXPECT_EQ(e2m1_from_float(1.25f), 0x2);
  EXPECT_EQ(e2m1_from_float(1.75f), 0x4);
  EXPECT_EQ(e2m1_from_float(2.5f), 0x4);
  EXPECT_EQ(e2m1_from_float(3.5f), 0x6);
  EXPECT_EQ(e2m1_from_float(5.0f), 0x6);
  EXPECT_EQ(e2m1_from_float(-5.0f), 0xE);
  EXPECT_EQ(e2m1_from_float(std::nextafter(0.25f, 1.0f)), 0x1);
  EXPECT_EQ(e2m1_from_float(std::nextafter(5.0f, 6.0f)), 0x7);
  EXPECT_EQ(e2m1_from_float(7.0f), 0x7);  // satfinite
  EXPECT_EQ(e2m1_from_float(-1e9f), 0xF);
  EXPECT_EQ(e2m1_from_float(kInf), 0x7);
  EXPECT_EQ(e2m1_from_float(-kInf), 0xF);
  EXPECT_EQ(e2m1_from_float(kNaN), 0x7);  // PTX cvt.rn.satfinite.e2m1x2: NaN -> +MAXNORM
  EXPECT_EQ(e2m1_from_float(-kNaN), 0x7);
  EXPECT_EQ(e2m1_from_float(-0.1f), 0x8);  // sign kept on underflow to zero
}

TEST(E2m1, MatchesNearestGridSearch) {
  for (float x : probes(formats_test::e2m1_grid(), 12, 200000)) {
    ASSERT_EQ(e2m1_from_float(x), formats_test::ref_e2m1(x)) << "x = " << x;
  }
}

TEST(E2m1, PackPutsEvenElementInLowNibble) {
  EXPECT_EQ(e2m1x2_pack(0x3, 0xA), 0xA3);
  EXPECT_EQ(e2m1x2_pack(0xF, 0x0), 0x0F);
  EXPECT_EQ(e2m1x2_unpack(0xA3, 0), 0x3);
  EXPECT_EQ(e2m1x2_unpack(0xA3, 1), 0xA);
}

// ---- ue8m0 --------------------------------------------------------------------------------------

TEST(Ue8m0, DecodeAllCodes) {
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(static_cast<double>(ue8m0_to_float(static_cast<uint8_t>(c))),
              std::ldexp(1.0, c - 127))
        << "code " << c;
    EXPECT_EQ(ue8m0_from_float_round_up(ue8m0_to_float(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_float(0xFF)));
}

TEST(Ue8m0, RoundUpEdges) {
  EXPECT_EQ(ue8m0_from_float_round_up(1.0f), 127);
  EXPECT_EQ(ue8m0_from_float_round_up(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(ue8m0_from_float_round_up(std::nextafter(1.0f, 0.0f)), 127);
  EXPECT_EQ(ue8m0_from_float_round_up(0.2232f), 125);  // -> 0.25
  EXPECT_EQ(ue8m0_from_float_round_up(std::ldexp(1.0f, -127)), 0);
  EXPECT_EQ(ue8m0_from_float_round_up(std::nextafter(std::ldexp(1.0f, -127), 1.0f)), 1);
  EXPECT_EQ(ue8m0_from_float_round_up(std::ldexp(1.0f, -126)), 1);
  EXPECT_EQ(ue8m0_from_float_round_up(1e-45f), 0);
  EXPECT_EQ(ue8m0_from_float_round_up(0.0f), 0);
  EXPECT_EQ(ue8m0_from_float_round_up(-0.0f), 0);
  EXPECT_EQ(ue8m0_from_float_round_up(-3.0f), 0);
  EXPECT_EQ(ue8m0_from_float_round_up(std::ldexp(1.0f, 127)), 254);
  EXPECT_EQ(ue8m0_from_float_round_up(std::nextafter(std::ldexp(1.0f, 127), kInf)), 254);
  EXPECT_EQ(ue8m0_from_float_round_up(kInf), 254);
  EXPECT_EQ(ue8m0_from_float_round_up(kNaN), 0xFF);
}

TEST(Ue8m0, MatchesSmallestPowerOfTwoSearch) {
  std::mt19937 rng(13);
  std::vector<float> xs;
  for (uint32_t b = 0; b < 0x7F800000u; b += 65537u) xs.push_back(float_of(b));
  for (int i = 0; i < 100000; ++i) xs.push_back(float_of(rng() & 0x7FFFFFFFu));
  for (int e = -149; e <= 127; ++e) {
    const float p = std::ldexp(1.0f, e);
    for (float v : {p, std::nextafter(p, 0.0f), std::nextafter(p, kInf)}) xs.push_back(v);
  }
  for (float x : xs)
    ASSERT_EQ(ue8m0_from_float_round_up(x), formats_test::ref_ue8m0_round_up(x)) << x;
}

// ---- bf16 / fp16 --------------------------------------------------------------------------------

TEST(Bf16, AllPatternsDecodeEncodeIdentity) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float x = bf16_to_float(static_cast<uint16_t>(b));
    const uint32_t exp = (b >> 7) & 0xFF;
    const uint32_t mant = b & 0x7F;
    if (exp == 0xFF && mant != 0) {
      EXPECT_TRUE(std::isnan(x)) << b;
      EXPECT_EQ(bf16_from_float(x), b | 0x40) << b;  // quieted, sign and payload kept
      continue;
    }
    const double mag = exp == 0xFF ? INFINITY : formats_test::minifloat_value(exp, mant, 7, 127);
    EXPECT_EQ(static_cast<double>(x), (b & 0x8000) ? -mag : mag) << b;
    EXPECT_EQ(bf16_from_float(x), b) << b;
  }
}

TEST(Bf16, TiesOverflowNaN) {
  EXPECT_EQ(bf16_from_float(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(bf16_from_float(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(bf16_from_float(-kInf), 0xFF80);
  EXPECT_EQ(bf16_from_float(-kNaN) & 0xFFC0, 0xFFC0);
  EXPECT_EQ(bf16_from_float(float_of(0x7F800001u)), 0x7FC0);  // signalling -> quiet
  EXPECT_EQ(bf16_from_float(float_of(0x00008000u)), 0x0000);  // subnormal tie -> even
  EXPECT_EQ(bf16_from_float(float_of(0x00018000u)), 0x0002);
}

TEST(Bf16, MatchesNearestGridSearch) {
  for (float x : probes(formats_test::bf16_grid(), 14, 100000)) {
    ASSERT_EQ(bf16_from_float(x), formats_test::round_signed(formats_test::bf16_grid(), x, 15))
        << x;
  }
}

TEST(Fp16, AllPatternsDecodeEncodeIdentity) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float x = fp16_to_float(static_cast<uint16_t>(b));
    const uint32_t exp = (b >> 10) & 0x1F;
    const uint32_t mant = b & 0x3FF;
    if (exp == 0x1F && mant != 0) {
      EXPECT_TRUE(std::isnan(x)) << b;
      EXPECT_EQ(fp16_from_float(x), b | 0x200) << b;
      continue;
    }
    const double mag = exp == 0x1F ? INFINITY : formats_test::minifloat_value(exp, mant, 10, 15);
    EXPECT_EQ(static_cast<double>(x), (b & 0x8000) ? -mag : mag) << b;
    EXPECT_EQ(fp16_from_float(x), b) << b;
  }
}

TEST(Fp16, TiesSubnormalsOverflowNaN) {
  EXPECT_EQ(fp16_from_float(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(fp16_from_float(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(fp16_from_float(std::ldexp(1.0f, -25)), 0x0000);  // half min subnormal: tie -> 0
  EXPECT_EQ(fp16_from_float(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp16_from_float(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(fp16_from_float(3 * std::ldexp(1.0f, -25)), 0x0002);      // 1 | 2: tie -> 2
  EXPECT_EQ(fp16_from_float(-2047 * std::ldexp(1.0f, -25)), 0x8400);  // carries to min normal
  EXPECT_EQ(fp16_from_float(65504.0f), 0x7BFF);
  EXPECT_EQ(fp16_from_float(65519.0f), 0x7BFF);
  EXPECT_EQ(fp16_from_float(65520.0f), 0x7C00);  // tie -> even = inf
  EXPECT_EQ(fp16_from_float(-1e10f), 0xFC00);
  EXPECT_EQ(fp16_from_float(kInf), 0x7C00);
  EXPECT_EQ(fp16_from_float(kNaN) & 0x7E00, 0x7E00);
  EXPECT_EQ(fp16_from_float(-kNaN) & 0xFE00, 0xFE00);
}

TEST(Fp16, MatchesNearestGridSearch) {
  for (float x : probes(formats_test::fp16_grid(), 15, 100000)) {
    ASSERT_EQ(fp16_from_float(x), formats_test::round_signed(formats_test::fp16_grid(), x, 15))
        << x;
  }
}

// ---- arithmetic helpers -------------------------------------------------------------------------

TEST(Arithmetic, CorrectlyRoundedHelpers) {
  std::mt19937 rng(16);
  for (int i = 0; i < 100000; ++i) {
    const float a = float_of(rng() & 0xFFFFFFFFu);
    const float b = float_of(rng() & 0xFFFFFFFFu);
    if (std::isnan(a) || std::isnan(b)) continue;
    const float prod = mul_rn(a, b);
    if (!std::isnan(prod)) {
      EXPECT_TRUE(same_bits(prod, formats_test::ref_mul(a, b)));
    }
    EXPECT_TRUE(same_bits(rcp_rn(b), formats_test::ref_rcp(b)));
    const float quot = div_rn(a, b);
    if (!std::isnan(quot)) {
      EXPECT_TRUE(same_bits(quot, formats_test::ref_div(a, b)));
    }
  }
  EXPECT_EQ(rcp_rn(6.0f), float_of(0x3E2AAAABu));
  EXPECT_EQ(rcp_rn(0.0f), kInf);
  EXPECT_EQ(rcp_rn(kInf), 0.0f);
  EXPECT_EQ(max_ignore_nan(kNaN, 2.0f), 2.0f);
  EXPECT_EQ(max_ignore_nan(3.0f, kNaN), 3.0f);
  EXPECT_TRUE(same_bits(abs_bits(-0.0f), 0.0f));
}

}  // namespace
}  // namespace formats
}  // namespace cakemoe
