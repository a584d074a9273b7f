// Tests of the per-token NVFP4 requantization reference (spec stepfun §6): a hand-computed row,
// zero rows, -1 entries, untouched rows, the three SF layouts and argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cakemoe/errors.h"
#include "formats/quantize.h"
#include "reference/stepfun/requant.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using cakemoe::stepfun::SfLayout;

constexpr uint8_t kPoisonByte = 0xFF;

uint16_t bf16_bits(float x) {  // only for values that are exactly bf16
  uint32_t b;
  std::memcpy(&b, &x, 4);
  EXPECT_EQ(b & 0xFFFFu, 0u) << x;
  return static_cast<uint16_t>(b >> 16);
}

float float_of_bf16(uint16_t h) {
  const uint32_t b = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

/// Spec §4.4 SF offsets, restated here from the formulas.
int64_t spec_sf_offset(SfLayout layout, int64_t r, int64_t c, int64_t C) {
  const int64_t c4 = (C + 3) / 4;
  switch (layout) {
    case SfLayout::kR8C4:
      return (r / 8) * (c4 * 32) + (c / 4) * 32 + (r % 8) * 4 + (c % 4);
    case SfLayout::kR128C4:
      return (r / 128) * (c4 * 512) + (c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 +
             (c % 4);
    default:
      return r * C + c;
  }
}

int64_t spec_sf_bytes(SfLayout layout, int64_t rows, int64_t C) {
  const int64_t c4 = (C + 3) / 4 * 4;
  switch (layout) {
    case SfLayout::kR8C4: return (rows + 7) / 8 * 8 * c4;
    case SfLayout::kR128C4: return (rows + 127) / 128 * 128 * c4;
    default: return rows * C;
  }
}

struct Outputs {
  std::vector<uint8_t> packed, sf;
  std::vector<float> scale;
  Outputs(int64_t rows, int64_t I, SfLayout layout)
      : packed(rows * I / 2, kPoisonByte), sf(spec_sf_bytes(layout, rows, I / 16), kPoisonByte),
        scale(rows, std::nanf("")) {}
};

Outputs run(const std::vector<uint16_t>& x, int64_t rows, int64_t I,
            const std::vector<int32_t>& e2p, SfLayout layout, double global_scale_inv) {
  Outputs o(rows, I, layout);
  requant_nvfp4_per_token(x.data(), rows, I, e2p.data(), static_cast<int64_t>(e2p.size()), layout,
                          global_scale_inv, o.packed.data(), o.sf.data(), o.scale.data());
  return o;
}

// Row with rowAmax 2048 and global_scale_inv 2^-11: p = 1, enc = 1.
// Block 0: vecMax 2048 -> SF = e4m3(2048 * rcp(6)) = e4m3(341.33) = 352 (0x7B); x / 352 -> codes.
// Block 1: vecMax 3 -> SF = e4m3(0.5) = 0x30; scale 2 -> codes.
const float kHandRow[32] = {2048, -1024, 512, 0, 176, -352, 700, 1408,
                            96, -40, 1088, -1600, 280, 800, -2000, 30,
                            3, -1.5f, 0.30078125f, -0.0625f, 1, 0.75f, -2, 1.125f,
                            0.5f, -0.8125f, 2.75f, 0, 1.625f, -3, 0.4375f, -0.25f};
// Codes (lo nibble = even element): block 0 {7,D, 3,0, 1,A, 4,6, 1,8, 5,E, 2,4, F,0},
// block 1 {7,D, 1,8, 4,3, E,4, 2,B, 7,0, 5,F, 2,9}.
const uint8_t kHandPacked[16] = {0xD7, 0x03, 0xA1, 0x64, 0x81, 0xE5, 0x42, 0x0F,
                                 0xD7, 0x81, 0x34, 0x4E, 0xB2, 0x07, 0xF5, 0x92};
const uint8_t kHandSf[2] = {0x7B, 0x30};

TEST(StepfunRequant, HandComputedRowZeroRowAndUntouchedRowsInEveryLayout) {
  const int64_t rows = 16, I = 32;
  testbed::Rng rng(3);
  std::vector<uint16_t> x(rows * I);
  for (auto& v : x) v = static_cast<uint16_t>(bits_of(rng.normal() * 5.0f) >> 16);  // unread
  for (int j = 0; j < I; ++j) {
    x[9 * I + j] = bf16_bits(kHandRow[j]);
    x[3 * I + j] = static_cast<uint16_t>(j % 2 ? 0x8000 : 0x0000);  // +-0: a zero row
  }
  // Rows 9 and 3 visited (9 twice), -1 entries skipped; every other row stays poisoned.
  const std::vector<int32_t> e2p = {-1, 9, 3, -1, 9};
  for (SfLayout layout : {SfLayout::kLinear, SfLayout::kR8C4, SfLayout::kR128C4}) {
    SCOPED_TRACE(static_cast<int>(layout));
    const Outputs o = run(x, rows, I, e2p, layout, 0x1p-11);
    for (int64_t r = 0; r < rows; ++r) {
      const bool hand = r == 9, zero = r == 3;
      for (int64_t b = 0; b < I / 2; ++b) {
        const uint8_t want = hand ? kHandPacked[b] : zero ? 0 : kPoisonByte;
        EXPECT_EQ(o.packed[r * I / 2 + b], want) << "row " << r << " byte " << b;
      }
      for (int64_t c = 0; c < I / 16; ++c) {
        const uint8_t want = hand ? kHandSf[c] : zero ? 0 : kPoisonByte;
        EXPECT_EQ(o.sf[spec_sf_offset(layout, r, c, I / 16)], want) << "row " << r << " sf " << c;
      }
      const uint32_t scale_bits = bits_of(o.scale[r]);
      if (hand) {
        EXPECT_EQ(scale_bits, bits_of(1.0f));
      } else if (zero) {
        EXPECT_EQ(scale_bits, 0u);
      } else {
        EXPECT_TRUE(std::isnan(o.scale[r])) << r;
      }
    }
    // Exactly 2 rows * 2 SF bytes were written; padding and other rows keep their poison.
    int64_t written = 0;
    for (uint8_t s : o.sf) written += s != kPoisonByte;
    EXPECT_EQ(written, 4);
  }
}

TEST(StepfunRequant, DefaultGlobalScaleAndFloatCastOfIt) {
  const int64_t I = 16;
  std::vector<uint16_t> x(I, bf16_bits(1.0f));
  x[5] = bf16_bits(-2688.0f);
  const Outputs o = run(x, 1, I, {0}, SfLayout::kLinear, kRequantGlobalScaleInv);
  // p = rowAmax * float(1/2688), one fp32 rounding of the product.
  const float p = 2688.0f * static_cast<float>(1.0 / 2688.0);
  EXPECT_EQ(bits_of(o.scale[0]), bits_of(p));
  EXPECT_NEAR(o.scale[0], 1.0, 1e-6);
}

TEST(StepfunRequant, UnderflowedDecodeScaleGivesAZeroRow) {
  // rowAmax = 2^-126, global_scale_inv = 2^-30: p = 2^-156 rounds to 0 although the row is not
  // zero; the explicit p == 0 guard of spec §6 writes zeros (enc = inf would saturate the SFs).
  const int64_t I = 32;
  std::vector<uint16_t> x(I, 0);
  x[4] = 0x0080;   // 2^-126
  x[20] = 0x8040;  // -2^-127
  const Outputs o = run(x, 1, I, {0}, SfLayout::kR8C4, 0x1p-30);
  EXPECT_EQ(bits_of(o.scale[0]), 0u);
  for (int64_t b = 0; b < I / 2; ++b) EXPECT_EQ(o.packed[b], 0) << b;
  EXPECT_EQ(o.sf[spec_sf_offset(SfLayout::kR8C4, 0, 0, 2)], 0);
  EXPECT_EQ(o.sf[spec_sf_offset(SfLayout::kR8C4, 0, 1, 2)], 0);
}

TEST(StepfunRequant, RandomRowsMatchFormatsRowRuleAndDequantize) {
  testbed::Rng rng(99);
  const int64_t rows = 40, I = 128, C = I / 16;
  std::vector<uint16_t> x(rows * I);
  for (auto& v : x) v = static_cast<uint16_t>(bits_of(rng.normal() * 3.0f) >> 16);
  // Visit a random half of the rows through a shuffled e2p with -1 holes.
  std::vector<int32_t> e2p;
  for (int32_t r = 0; r < rows; ++r) {
    e2p.push_back(r % 2 ? r : -1);
  }
  std::shuffle(e2p.begin(), e2p.end(), rng.engine());
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = float_of_bf16(x[i]);
  std::vector<float> want_scale;
  const formats::Nvfp4Matrix want =
      formats::nvfp4_per_token_quantize_matrix(xf.data(), rows, I, 1.0f / 2688.0f, &want_scale);
  for (SfLayout layout : {SfLayout::kLinear, SfLayout::kR8C4, SfLayout::kR128C4}) {
    SCOPED_TRACE(static_cast<int>(layout));
    const Outputs o = run(x, rows, I, e2p, layout, 1.0 / 2688.0);
    for (int64_t r = 0; r < rows; ++r) {
      if (r % 2 == 0) {
        EXPECT_TRUE(std::isnan(o.scale[r]));
        continue;
      }
      EXPECT_EQ(bits_of(o.scale[r]), bits_of(want_scale[r])) << r;
      for (int64_t b = 0; b < I / 2; ++b) {
        ASSERT_EQ(o.packed[r * I / 2 + b], want.packed[r * I / 2 + b]) << r << "," << b;
      }
      for (int64_t c = 0; c < C; ++c) {
        const uint8_t sf = o.sf[spec_sf_offset(layout, r, c, C)];
        ASSERT_EQ(sf, want.sf[r * C + c]) << r << "," << c;
        // Dequantized values stay within one coarse e2m1 step of the input.
        for (int64_t j = c * 16; j < c * 16 + 16; ++j) {
          const uint8_t byte = o.packed[r * I / 2 + j / 2];
          const float deq = formats::nvfp4_dequantize(j % 2 ? byte >> 4 : byte & 0xF, sf,
                                                      o.scale[r]);
          float vec_max = 0.0f;
          for (int64_t i = c * 16; i < c * 16 + 16; ++i) {
            vec_max = std::max(vec_max, std::fabs(xf[r * I + i]));
          }
          EXPECT_LE(std::fabs(deq - xf[r * I + j]), 0.25f * vec_max) << r << "," << j;
        }
      }
    }
  }
}

TEST(StepfunRequant, HandOffsetsOfWiderRows) {
  // I = 128 -> 8 SF columns; (r, c) = (9, 5) lands at 77 (linear), 101 (r8c4), 657 (r128c4).
  const int64_t rows = 16, I = 128;
  std::vector<uint16_t> x(rows * I, 0);
  x[9 * I + 5 * 16 + 3] = bf16_bits(6.0f);  // the only non-zero block of row 9
  const int64_t want_offset[] = {77, 101, 657};
  const SfLayout layouts[] = {SfLayout::kLinear, SfLayout::kR8C4, SfLayout::kR128C4};
  for (int i = 0; i < 3; ++i) {
    const Outputs o = run(x, rows, I, {9}, layouts[i], 1.0 / 2688.0);
    for (int64_t off = 0; off < static_cast<int64_t>(o.sf.size()); ++off) {
      const bool row9 = [&] {
        for (int64_t c = 0; c < 8; ++c) {
          if (spec_sf_offset(layouts[i], 9, c, 8) == off) return true;
        }
        return false;
      }();
      if (off == want_offset[i]) {
        EXPECT_NE(o.sf[off], 0) << i;
        EXPECT_NE(o.sf[off], kPoisonByte) << i;
      } else {
        EXPECT_EQ(o.sf[off], row9 ? 0 : kPoisonByte) << i << " @" << off;
      }
    }
  }
}

TEST(StepfunRequant, RejectsBadShapesAndSlotsBeforeWriting) {
  const int64_t rows = 8;
  std::vector<uint16_t> x(rows * 32, bf16_bits(1.0f));
  auto expect_throw = [&](int64_t I, std::vector<int32_t> e2p, const char* arg) {
    Outputs o(rows, 32, SfLayout::kLinear);
    try {
      requant_nvfp4_per_token(x.data(), rows, I, e2p.data(), static_cast<int64_t>(e2p.size()),
                              SfLayout::kLinear, 1.0 / 2688.0, o.packed.data(), o.sf.data(),
                              o.scale.data());
      ADD_FAILURE() << "no throw for " << arg;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), arg);
    }
    for (uint8_t b : o.packed) ASSERT_EQ(b, kPoisonByte);
    for (uint8_t b : o.sf) ASSERT_EQ(b, kPoisonByte);
    for (float s : o.scale) ASSERT_TRUE(std::isnan(s));
  };
  expect_throw(24, {0}, "gemm1_output");
  expect_throw(0, {0}, "gemm1_output");
  expect_throw(32, {0, 8}, "expanded_idx_to_permuted_idx");
  expect_throw(32, {1, -2}, "expanded_idx_to_permuted_idx");
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
