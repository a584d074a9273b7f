// Block quantizers: hand-derived vectors, zero blocks, and random data against a slow
// re-derivation in double precision (tests/formats/slow_reference.h).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cakemoe/errors.h"
#include "formats/quantize.h"
#include "slow_reference.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace formats {
namespace {

namespace ref = formats_test;
const float kInf = std::numeric_limits<float>::infinity();

using Bytes = std::vector<uint8_t>;

// ---- Slow re-derivations (double-precision arithmetic, nearest-grid rounding) -------------------

double ref_amax(const float* x, int n) {
  double m = 0;
  for (int i = 0; i < n; ++i) m = std::fmax(m, std::fabs(static_cast<double>(x[i])));
  return m;
}

/// Codes of x_i * scale for 16 values, packed; the rule of the block is the caller's.
void ref_pack16(const float* x, float scale, uint8_t* packed) {
  for (int i = 0; i < 8; ++i) {
    const uint8_t lo = ref::ref_e2m1(ref::ref_mul(x[2 * i], scale));
    const uint8_t hi = ref::ref_e2m1(ref::ref_mul(x[2 * i + 1], scale));
    packed[i] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void ref_nvfp4_global(const float* x, float enc, uint8_t* packed, uint8_t* sf) {
  const float vec_max = static_cast<float>(ref_amax(x, 16));
  const uint8_t code = ref::ref_e4m3(ref::ref_mul(enc, ref::ref_mul(vec_max, ref::ref_rcp(6.f))));
  const float sf_value = static_cast<float>(ref::ref_e4m3_value(code));
  if (vec_max == 0 || sf_value == 0) {
    for (int i = 0; i < 8; ++i) packed[i] = 0;
    *sf = 0;
    return;
  }
  ref_pack16(x, ref::ref_rcp(ref::ref_mul(sf_value, ref::ref_rcp(enc))), packed);
  *sf = code;
}

void ref_nvfp4_unit(const float* x, uint8_t* packed, uint8_t* sf) {
  const float vec_max = static_cast<float>(ref_amax(x, 16));
  const uint8_t code = ref::ref_e4m3(ref::ref_mul(vec_max, ref::ref_rcp(6.f)));
  const float sf_value = static_cast<float>(ref::ref_e4m3_value(code));
  if (sf_value == 0) {
    for (int i = 0; i < 8; ++i) packed[i] = 0;
    *sf = 0;
    return;
  }
  ref_pack16(x, ref::ref_rcp(sf_value), packed);
  *sf = code;
}

void ref_mxfp8(const float* x, uint8_t* q, uint8_t* sf) {
  double amax = ref_amax(x, 32);
  if (amax < std::ldexp(1.0, -126)) amax = 0;
  const uint8_t code =
      ref::ref_ue8m0_round_up(ref::ref_div(amax != 0 ? float(amax) : 448.f, 448.f));
  for (int i = 0; i < 32; ++i)
    q[i] = ref::ref_e4m3(std::ldexp(static_cast<double>(x[i]), 127 - code));
  *sf = code;
}

/// Random matrix with rows of very different magnitudes, a zero row, zeros and outliers.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  testbed::Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::pow(10.f, rng.uniform(-4.f, 4.f));
    for (int64_t c = 0; c < cols; ++c) {
      float v = rng.normal() * row_scale;
      if (rng.integer(0, 50) == 0) v = 0.f;
      if (rng.integer(0, 200) == 0) v *= 40.f;
      x[r * cols + c] = r == 3 ? 0.f : v;
    }
  }
  return x;
}

void expect_bytes(const Bytes& got, const Bytes& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << " differs at byte " << i;
  }
}

// ---- NVFP4 hand-derived blocks ------------------------------------------------------------------

TEST(Nvfp4Unit, GridValuesBlock) {
  // vec_max 6: 6 * rcp_rn(6) = 1 + 2^-25 rounds to 1.0 -> sf 1.0 = e4m3 0x38, scale 1.
  // Every value is on the e2m1 grid except 0.25, a tie between 0 and 0.5 -> 0.
  const std::array<float, 16> v = {0,     0.5f, 1,     1.5f, 2,  3,  4,  6,
                                   -0.5f, -1,   -1.5f, -2,   -3, -4, -6, 0.25f};
  Bytes packed(8, 0xEE);
  uint8_t sf = 0xEE;
  nvfp4_quantize_block16_unit(v.data(), packed.data(), &sf);
  EXPECT_EQ(sf, 0x38);
  expect_bytes(packed, {0x10, 0x32, 0x54, 0x76, 0xA9, 0xCB, 0xED, 0x0F}, "packed");
}

TEST(Nvfp4Unit, RoundedScaleBlock) {
  // vec_max 10: 10/6 = 1.667 -> e4m3 1.625 (0x3D; 1.75 is farther). scale = 1/1.625 = 0.61538.
  // v * scale: 10->6.15:6(7) 1->.62:.5(1) 2->1.23:1(2) 3->1.85:2(4) 4->2.46:2(4) 5->3.08:3(5)
  // 6->3.69:4(6) 8->4.92:4(6) 9->5.54:6(7) -10->-6(F) -1->-.5(9) 0->0 .3->.18:0 -7->-4.31:-4(E)
  // 2.4->1.48:1.5(3) .05->.03:0.
  const std::array<float, 16> v = {10, 1, 2, 3, 4, 5, 6, 8, 9, -10, -1, 0, 0.3f, -7, 2.4f, 0.05f};
  Bytes packed(8, 0xEE);
  uint8_t sf = 0xEE;
  nvfp4_quantize_block16_unit(v.data(), packed.data(), &sf);
  EXPECT_EQ(sf, 0x3D);
  expect_bytes(packed, {0x17, 0x42, 0x54, 0x66, 0xF7, 0x09, 0xE0, 0x03}, "packed");
  // Dequantized: e2m1 * 1.625.
  EXPECT_EQ(nvfp4_dequantize(0x7, sf, 1.0f), 9.75f);
  EXPECT_EQ(nvfp4_dequantize(0xE, sf, 1.0f), -6.5f);
}

TEST(Nvfp4Global, TensorScaleBlock) {
  // enc = 2688 (global amax 1), vec_max 1: sf = e4m3(2688/6 = 448) = 0x7E; scale = 1/(448/2688)
  // ~= 6 (within an ulp). x*6: 1->6(7) -1->F .5->3(5) .25->1.5(3) .1->.6:.5(1) .3->1.8:2(4)
  // .7->4.2:4(6) .9->5.4:6(7) .05->.3:.5(1) .02->.12:0 -.45->-2.7:-3(D) .375->2.25:2(4)
  // .6->3.6:4(6) .8->4.8:4(6) -.2->-1.2:-1(A) 0->0.
  const std::array<float, 16> x = {1,     -1,    0.5f,   0.25f,  0.1f, 0.3f, 0.7f,  0.9f,
                                   0.05f, 0.02f, -0.45f, 0.375f, 0.6f, 0.8f, -0.2f, 0};
  Bytes packed(8, 0xEE);
  uint8_t sf = 0xEE;
  nvfp4_quantize_block16(x.data(), 2688.f, packed.data(), &sf);
  EXPECT_EQ(sf, 0x7E);
  expect_bytes(packed, {0xF7, 0x35, 0x41, 0x76, 0x01, 0x4D, 0x66, 0x0A}, "packed");
  // Dequantized with global_decode = 1/2688: code 7 -> 6 * 448 / 2688 = 1.
  EXPECT_NEAR(nvfp4_dequantize(0x7, sf, 1.f / 2688.f), 1.0f, 1e-6f);
  EXPECT_NEAR(nvfp4_dequantize(0xD, sf, 1.f / 2688.f), -0.5f, 1e-6f);
}

TEST(Nvfp4Global, OperationOrderIsPinned) {
  // Inputs found by search where the spec's operation order decides a code (bitwise parity of
  // kernels and reference depends on keeping it).
  // (1) enc * (vec_max * rcp(6)) = 0x1.900004p+7, just above the e4m3 tie 200 (192 | 208) -> 208
  //     (0x75); (enc * vec_max) * rcp(6) would give exactly 200 -> 192 (0x74).
  std::array<float, 16> x{};
  x[0] = 0x1.c19638p+1f;
  Bytes packed(8, 0xEE);
  uint8_t sf = 0xEE;
  nvfp4_quantize_block16(x.data(), 0x1.55a5a6p+8f, packed.data(), &sf);
  EXPECT_EQ(sf, 0x75);
  expect_bytes(packed, {0x07, 0, 0, 0, 0, 0, 0, 0}, "pin 1");  // 3.51 * 341.3/208 = 5.76 -> 6
  // (2) sf = e4m3(383.6 * 2.356/6 = 150.6) = 144 (0x71); scale = rcp(144 * rcp(enc)) =
  //     0x1.5502bcp+1 puts x[1] * scale just above the e2m1 tie 5 -> 6 (code 7); enc / 144 would
  //     give 0x1.5502bap+1 and 4 (code 6).
  x[0] = 0x1.2d951p+1f;
  x[1] = 0x1.e07446p+0f;
  nvfp4_quantize_block16(x.data(), 0x1.7fa312p+8f, packed.data(), &sf);
  EXPECT_EQ(sf, 0x71);
  expect_bytes(packed, {0x77, 0, 0, 0, 0, 0, 0, 0}, "pin 2");
}

TEST(Nvfp4Global, ZeroAndUnderflowBlocks) {
  const std::array<float, 16> zeros{};
  Bytes packed(8, 0xEE);
  uint8_t sf = 0xEE;
  nvfp4_quantize_block16(zeros.data(), kInf, packed.data(), &sf);  // zero row: enc = +inf
  EXPECT_EQ(sf, 0);
  expect_bytes(packed, Bytes(8, 0), "zero block, enc inf");
  std::fill(packed.begin(), packed.end(), 0xEE);
  nvfp4_quantize_block16(zeros.data(), 3.f, packed.data(), &sf);
  expect_bytes(packed, Bytes(8, 0), "zero block");
  // vec_max 1e-5 with enc 1: sf = e4m3(1.7e-6) underflows to 0 -> the block encodes as zeros.
  std::array<float, 16> tiny{};
  tiny[5] = 1e-5f;
  std::fill(packed.begin(), packed.end(), 0xEE);
  sf = 0xEE;
  nvfp4_quantize_block16(tiny.data(), 1.f, packed.data(), &sf);
  EXPECT_EQ(sf, 0);
  expect_bytes(packed, Bytes(8, 0), "underflow block");
  std::fill(packed.begin(), packed.end(), 0xEE);
  nvfp4_quantize_block16_unit(zeros.data(), packed.data(), &sf);
  expect_bytes(packed, Bytes(8, 0), "zero block, unit rule");
}

TEST(Nvfp4PerToken, ZeroRowGivesZerosAndZeroScale) {
  std::vector<float> row(64, 0.f);
  Bytes packed(32, 0xEE), sf(4, 0xEE);
  const float p =
      nvfp4_per_token_quantize_row(row.data(), 64, 1.f / 2688.f, packed.data(), sf.data());
  EXPECT_EQ(p, 0.f);
  expect_bytes(packed, Bytes(32, 0), "packed");
  expect_bytes(sf, Bytes(4, 0), "sf");
}

// ---- MXFP8 / FP8 hand-derived blocks ------------------------------------------------------------

TEST(Mxfp8, HandDerivedBlocks) {
  std::vector<float> x(6 * 32, 0.f);
  // Block 0: amax 100 -> 100/448 = 0.223 -> round up 0.25 = 2^-2, code 125, multiplier 4.
  // 100->400: tie 384|416 -> 384 (0x7C); 1->4 (0x48); -.3->-1.2: -1.25 (0xBA);
  // .001->.004 = 2.05 * 2^-9 -> subnormal 2 (0x02); -100 -> 0xFC; 50->200: tie 192|208 -> 192
  // (0x74); .0625->.25 (0x28).
  const float b0[] = {100, 1, -0.3f, 0.001f, -100, 50, 0.0625f};
  std::copy(b0, b0 + 7, x.begin());
  // Block 1: amax 449 -> 449/448 > 1 -> code 128, multiplier 0.5. 449->224.5: 224 (0x76);
  // -3->-1.5 (0xBC); .01->.005 = 2.56 * 2^-9 -> 3 (0x03).
  x[32] = 449;
  x[33] = -3;
  x[34] = 0.01f;
  // Block 2: zeros -> (amax 0 -> 448)/448 = 1 -> code 127, codes 0.
  // Block 3: amax exactly 448 -> code 127, 448 -> 0x7E.
  x[96] = 448;
  // Block 4: denormal amax 1e-40 is flushed -> code 127, q = e4m3(1e-40) = 0.
  x[128] = 1e-40f;
  // Block 5: amax 1e38 -> 1e38/448 = 2.23e35 -> 2^118 (3.3e35), code 245; 1e38*2^-118 = 300.9:
  // 288 (0x79) is nearer than 320.
  x[160] = 1e38f;
  const Mxfp8Matrix m = mxfp8_quantize_matrix(x.data(), 1, 6 * 32);
  expect_bytes(m.sf, {125, 128, 127, 127, 127, 245}, "codes");
  Bytes want(6 * 32, 0);
  const uint8_t w0[] = {0x7C, 0x48, 0xBA, 0x02, 0xFC, 0x74, 0x28};
  std::copy(w0, w0 + 7, want.begin());
  want[32] = 0x76;
  want[33] = 0xBC;
  want[34] = 0x03;
  want[96] = 0x7E;
  want[160] = 0x79;
  expect_bytes(m.q, want, "q");
  EXPECT_EQ(mxfp8_dequantize(0x7C, 125), 96.f);   // 384 * 2^-2
  EXPECT_EQ(mxfp8_dequantize(0x76, 128), 448.f);  // 224 * 2
}

TEST(Fp8, HandDerivedValues) {
  EXPECT_EQ(fp8_quantize(2.f, 112.f), 0x76);    // 224
  EXPECT_EQ(fp8_quantize(-5.f, 112.f), 0xFE);   // -560 saturates to -448
  EXPECT_EQ(fp8_quantize(0.01f, 112.f), 0x39);  // 1.12 -> 1.125
  EXPECT_EQ(fp8_dequantize(0x76, 1.f / 112.f), 224.f * (1.f / 112.f));
}

// ---- Random data against the slow re-derivation -------------------------------------------------

TEST(Nvfp4, MatricesMatchSlowReference) {
  const int64_t rows = 37, cols = 256;
  const std::vector<float> x = random_matrix(rows, cols, 101);
  std::vector<float> enc(rows);
  for (int64_t r = 0; r < rows; ++r) enc[r] = r == 3 ? kInf : 2688.f / (1.f + float(r) * 7.5f);
  const Nvfp4Matrix per_row = nvfp4_quantize_matrix(x.data(), rows, cols, enc.data());
  const Nvfp4Matrix scalar = nvfp4_quantize_matrix(x.data(), rows, cols, 12.5f);
  const Nvfp4Matrix unit = nvfp4_quantize_matrix_unit(x.data(), rows, cols);
  std::vector<float> p;
  const Nvfp4Matrix tok = nvfp4_per_token_quantize_matrix(x.data(), rows, cols, 1.f / 2688.f, &p);

  Bytes want_row(rows * cols / 2), want_row_sf(rows * cols / 16);
  Bytes want_scalar(want_row), want_scalar_sf(want_row_sf);
  Bytes want_unit(want_row), want_unit_sf(want_row_sf);
  Bytes want_tok(want_row), want_tok_sf(want_row_sf);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * cols;
    const float want_p = ref::ref_mul(static_cast<float>(ref_amax(row, cols)), 1.f / 2688.f);
    ASSERT_EQ(ref::bits_of(p[r]), ref::bits_of(want_p)) << "row " << r;
    for (int64_t b = 0; b < cols / 16; ++b) {
      const int64_t pk = r * cols / 2 + b * 8, s = r * cols / 16 + b;
      ref_nvfp4_global(row + b * 16, enc[r], &want_row[pk], &want_row_sf[s]);
      ref_nvfp4_global(row + b * 16, 12.5f, &want_scalar[pk], &want_scalar_sf[s]);
      ref_nvfp4_unit(row + b * 16, &want_unit[pk], &want_unit_sf[s]);
      ref_nvfp4_global(row + b * 16, ref::ref_rcp(want_p), &want_tok[pk], &want_tok_sf[s]);
    }
  }
  expect_bytes(per_row.packed, want_row, "per-row packed");
  expect_bytes(per_row.sf, want_row_sf, "per-row sf");
  expect_bytes(scalar.packed, want_scalar, "scalar packed");
  expect_bytes(scalar.sf, want_scalar_sf, "scalar sf");
  expect_bytes(unit.packed, want_unit, "unit packed");
  expect_bytes(unit.sf, want_unit_sf, "unit sf");
  expect_bytes(tok.packed, want_tok, "per-token packed");
  expect_bytes(tok.sf, want_tok_sf, "per-token sf");
}

TEST(Mxfp8, MatrixMatchesSlowReference) {
  const int64_t rows = 29, cols = 320;
  const std::vector<float> x = random_matrix(rows, cols, 202);
  const Mxfp8Matrix m = mxfp8_quantize_matrix(x.data(), rows, cols);
  Bytes want_q(rows * cols), want_sf(rows * cols / 32);
  for (int64_t i = 0; i < rows * cols / 32; ++i) {
    ref_mxfp8(x.data() + i * 32, &want_q[i * 32], &want_sf[i]);
  }
  expect_bytes(m.q, want_q, "q");
  expect_bytes(m.sf, want_sf, "sf");
}

TEST(Fp8, MatrixMatchesSlowReference) {
  const std::vector<float> x = random_matrix(9, 40, 303);
  const Bytes q = fp8_quantize_matrix(x.data(), 9, 40, 37.f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(q[i], ref::ref_e4m3(ref::ref_mul(x[i], 37.f)));
}

// ---- Dequantization -----------------------------------------------------------------------------

TEST(Dequantize, MatchesFormulaAndBoundsError) {
  const int64_t rows = 16, cols = 128;
  testbed::Rng rng(404);
  std::vector<float> x(rows * cols);
  for (float& v : x) v = rng.normal() * 3.f;
  std::vector<double> xd(x.begin(), x.end());

  std::vector<float> p;
  const Nvfp4Matrix n = nvfp4_per_token_quantize_matrix(x.data(), rows, cols, 1.f / 2688.f, &p);
  const std::vector<float> nd =
      nvfp4_dequantize_matrix(n.packed.data(), n.sf.data(), rows, cols, p.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = n.packed[r * cols / 2 + c / 2];
      const uint8_t code = (c & 1) ? byte >> 4 : byte & 0xF;
      const float want =
          ref::ref_mul(static_cast<float>(ref::ref_e2m1_value(code) *
                                          ref::ref_e4m3_value(n.sf[r * cols / 16 + c / 16])),
                       p[r]);
      ASSERT_EQ(nd[r * cols + c], want) << r << "," << c;
    }
  }
  EXPECT_LT(testbed::relative_frobenius({nd.begin(), nd.end()}, xd), 0.15);

  const Mxfp8Matrix m = mxfp8_quantize_matrix(x.data(), rows, cols);
  const std::vector<float> md = mxfp8_dequantize_matrix(m.q.data(), m.sf.data(), rows, cols);
  for (size_t i = 0; i < md.size(); ++i) {
    ASSERT_EQ(static_cast<double>(md[i]),
              ref::ref_e4m3_value(m.q[i]) * std::ldexp(1.0, m.sf[i / 32] - 127));
  }
  EXPECT_LT(testbed::relative_frobenius({md.begin(), md.end()}, xd), 0.05);

  const Bytes f = fp8_quantize_matrix(x.data(), rows, cols, 448.f / 12.f);
  const std::vector<float> fd = fp8_dequantize_matrix(f.data(), rows, cols, 12.f / 448.f);
  EXPECT_LT(testbed::relative_frobenius({fd.begin(), fd.end()}, xd), 0.05);
}

// ---- Validation ---------------------------------------------------------------------------------

TEST(QuantizeValidation, RejectsBadShapesAndNulls) {
  const std::vector<float> x(64, 1.f);
  try {
    nvfp4_quantize_matrix(x.data(), 2, 20, 1.f);
    FAIL() << "cols % 16 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "cols");
  }
  EXPECT_THROW(nvfp4_quantize_matrix(nullptr, 2, 32, 1.f), InvalidArgument);
  EXPECT_THROW(nvfp4_quantize_matrix(x.data(), 2, 32, static_cast<const float*>(nullptr)),
               InvalidArgument);
  EXPECT_THROW(mxfp8_quantize_matrix(x.data(), 1, 48), InvalidArgument);
  EXPECT_THROW(mxfp8_quantize_matrix(x.data(), -1, 32), InvalidArgument);
  EXPECT_THROW(nvfp4_per_token_quantize_matrix(x.data(), 2, 32, 1.f, nullptr), InvalidArgument);
  EXPECT_THROW(fp8_dequantize_matrix(nullptr, 1, 4, 1.f), InvalidArgument);
}

}  // namespace
}  // namespace formats
}  // namespace cakemoe
