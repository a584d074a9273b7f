// Layout maps of spec §4.4: bijections, inverses, hand-checked offsets and round trips.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cakemoe/errors.h"
#include "formats/layouts.h"
#include "formats/quantize.h"
#include "testbed/expect_error.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace formats {
namespace {

using stepfun::SfLayout;

/// True if f maps [0, n) onto [0, n) one to one.
template <typename F>
bool is_permutation_of_range(int64_t n, F f) {
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = f(i);
    if (j < 0 || j >= n || seen[j]) return false;
    seen[j] = 1;
  }
  return true;
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  testbed::Rng rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng.integer(1, 256));  // never 0: pads are 0
  return out;
}

// ---- (b) shuffle32 ------------------------------------------------------------------------------

TEST(Shuffle32, MatchesSrcToDstBlk32RowMap) {
  const int want[32] = {0, 8,  16, 24, 1, 9,  17, 25, 2, 10, 18, 26, 3, 11, 19, 27,
                        4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31};
  for (int s = 0; s < 32; ++s) {
    EXPECT_EQ(shuffle32_dst_offset(s), want[s]) << s;
    EXPECT_EQ(shuffle32_src_offset(want[s]), s) << s;
  }
  EXPECT_EQ(shuffle32_dst_row(32 * 5 + 6), 32 * 5 + 17);
  EXPECT_EQ(shuffle32_src_row(32 * 5 + 17), 32 * 5 + 6);
}

TEST(Shuffle32, BijectionAndInverse) {
  const int64_t rows = 32 * 9;
  EXPECT_TRUE(is_permutation_of_range(rows, shuffle32_dst_row));
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(shuffle32_src_row(shuffle32_dst_row(r)), r);
    EXPECT_EQ(shuffle32_dst_row(shuffle32_src_row(r)), r);
    EXPECT_EQ(w2_logical_row(w2_physical_row(r)), r);
  }
}

// ---- (a) gated interleave and the W1 composite --------------------------------------------------

TEST(GatedInterleave, HandRowsAndInverse) {
  const int64_t I = 48;
  EXPECT_EQ(gated_interleave_dst_row(0, I), 0);       // up_0
  EXPECT_EQ(gated_interleave_dst_row(I, I), 1);       // gate_0
  EXPECT_EQ(gated_interleave_dst_row(5, I), 10);      // up_5
  EXPECT_EQ(gated_interleave_dst_row(I + 5, I), 11);  // gate_5
  EXPECT_TRUE(
      is_permutation_of_range(2 * I, [&](int64_t r) { return gated_interleave_dst_row(r, I); }));
  for (int64_t r = 0; r < 2 * I; ++r) {
    EXPECT_EQ(gated_interleave_src_row(gated_interleave_dst_row(r, I), I), r);
  }
}

TEST(W1Composite, BlockContentsMatchSpecDescription) {
  // Spec §4.4: physical block b holds, in rows 0-7 / 8-15 / 16-23 / 24-31, the up / gate rows of
  // features 16b + {0,2,...,14} and then the up / gate rows of features 16b + {1,3,...,15}.
  const int64_t I = 64;
  for (int64_t b = 0; b < 2 * I / 32; ++b) {
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_EQ(w1_logical_row(32 * b + j, I), 16 * b + 2 * j);
      EXPECT_EQ(w1_logical_row(32 * b + 8 + j, I), I + 16 * b + 2 * j);
      EXPECT_EQ(w1_logical_row(32 * b + 16 + j, I), 16 * b + 2 * j + 1);
      EXPECT_EQ(w1_logical_row(32 * b + 24 + j, I), I + 16 * b + 2 * j + 1);
    }
  }
  EXPECT_TRUE(is_permutation_of_range(2 * I, [&](int64_t r) { return w1_physical_row(r, I); }));
  for (int64_t r = 0; r < 2 * I; ++r) EXPECT_EQ(w1_logical_row(w1_physical_row(r, I), I), r);
  // A thread owning lanes (j, j + 8) of a 32-row block holds (up, gate) of one feature.
  for (int64_t p = 0; p < 2 * I; p += 32) {
    for (int64_t j : {0, 1, 7, 16, 23}) {
      EXPECT_EQ(w1_logical_row(p + j + 8, I), w1_logical_row(p + j, I) + I);
    }
  }
}

TEST(W1Composite, RowMapsAndValidation) {
  const std::vector<int64_t> map = w1_row_map(1280);
  const std::vector<int64_t> inv = invert_row_map(map);
  for (size_t r = 0; r < map.size(); ++r) {
    EXPECT_EQ(inv[map[r]], static_cast<int64_t>(r));
    EXPECT_EQ(inv[r], w1_logical_row(static_cast<int64_t>(r), 1280));
  }
  EXPECT_THROW(w1_row_map(8), InvalidArgument);
  EXPECT_THROW(w2_row_map(48), InvalidArgument);
  EXPECT_THROW(invert_row_map({0, 0, 1}), InvalidArgument);
}

// ---- (c) 128x4, (e) r8c4, linear ----------------------------------------------------------------

TEST(SfLayouts, HandOffsets) {
  const int64_t C = 12;  // 3 groups of 4 columns
  EXPECT_EQ(sf_offset_128x4(0, 0, C), 0);
  EXPECT_EQ(sf_offset_128x4(0, 1, C), 1);
  EXPECT_EQ(sf_offset_128x4(1, 0, C), 16);
  EXPECT_EQ(sf_offset_128x4(32, 0, C), 4);
  EXPECT_EQ(sf_offset_128x4(31, 3, C), 31 * 16 + 3);
  EXPECT_EQ(sf_offset_128x4(127, 3, C), 511);
  EXPECT_EQ(sf_offset_128x4(0, 4, C), 512);
  EXPECT_EQ(sf_offset_128x4(128, 0, C), 3 * 512);
  EXPECT_EQ(sf_offset_r8c4(1, 0, C), 4);
  EXPECT_EQ(sf_offset_r8c4(7, 3, C), 31);
  EXPECT_EQ(sf_offset_r8c4(0, 4, C), 32);
  EXPECT_EQ(sf_offset_r8c4(8, 0, C), 3 * 32);
  EXPECT_EQ(sf_size_128x4(130, 5), 256 * 8);
  EXPECT_EQ(sf_size_r8c4(9, 5), 16 * 8);
  EXPECT_EQ(sf_size(SfLayout::kLinear, 9, 5), 45);
  EXPECT_EQ(sf_offset(SfLayout::kLinear, 2, 3, 5), 13);
  EXPECT_EQ(sf_offset(SfLayout::kR8C4, 7, 3, C), 31);
  EXPECT_EQ(sf_offset(SfLayout::kR128C4, 127, 3, C), 511);
}

TEST(SfLayouts, MatchKernelViewStrides) {
  // 128x4 as the kernel view [rows/128, C/4, 32 (r%32), 4 ((r%128)/32), 4 (c%4)], and r8c4 as
  // [rows/8, C/4, 8 (r%8), 4 (c%4)]: the same bytes written as nested strides.
  const int64_t rows = 256, C = 10, Cb = (C + 3) / 4;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t view128 =
          (((r / 128 * Cb + c / 4) * 32 + r % 32) * 4 + r % 128 / 32) * 4 + c % 4;
      const int64_t view8 = ((r / 8 * Cb + c / 4) * 8 + r % 8) * 4 + c % 4;
      ASSERT_EQ(sf_offset_128x4(r, c, C), view128) << r << "," << c;
      ASSERT_EQ(sf_offset_r8c4(r, c, C), view8) << r << "," << c;
    }
  }
}

TEST(SfLayouts, BijectionOverPaddedRange) {
  for (SfLayout layout : {SfLayout::kLinear, SfLayout::kR8C4, SfLayout::kR128C4}) {
    for (int64_t C : {4, 5, 12}) {
      const int64_t rows = layout == SfLayout::kR128C4 ? 256 : 24;
      const int64_t padded_cols = layout == SfLayout::kLinear ? C : (C + 3) / 4 * 4;
      const int64_t n = sf_size(layout, rows, C);
      ASSERT_EQ(n, rows * padded_cols);
      EXPECT_TRUE(is_permutation_of_range(
          n, [&](int64_t i) { return sf_offset(layout, i / padded_cols, i % padded_cols, C); }))
          << sf_layout_name(layout) << " C=" << C;
    }
  }
}

TEST(SfLayouts, SwizzleRoundTripAndZeroPadding) {
  for (SfLayout layout : {SfLayout::kLinear, SfLayout::kR8C4, SfLayout::kR128C4}) {
    const int64_t rows = 200, C = 7;
    const std::vector<uint8_t> linear = random_bytes(rows * C, 7);
    const std::vector<uint8_t> swz = swizzle_sf(layout, linear.data(), rows, C);
    ASSERT_EQ(static_cast<int64_t>(swz.size()), sf_size(layout, rows, C));
    int64_t zeros = 0;
    for (uint8_t b : swz) zeros += b == 0;
    EXPECT_EQ(zeros, sf_size(layout, rows, C) - rows * C) << "pad bytes must be 0";
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(swz[sf_offset(layout, r, c, C)], linear[r * C + c]);
    }
    EXPECT_EQ(unswizzle_sf(layout, swz.data(), rows, C), linear);
  }
  EXPECT_THROW(swizzle_sf(SfLayout::kR8C4, nullptr, 2, 2), InvalidArgument);
}

// ---- (d) BlockMajorK ----------------------------------------------------------------------------

TEST(BlockMajorK, HandOffsetsAndRoundTrip) {
  EXPECT_EQ(block_major_k_offset(1, 0, 3), 64);
  EXPECT_EQ(block_major_k_offset(0, 64, 3), 192);
  EXPECT_EQ(block_major_k_offset(2, 65, 3), (1 * 3 + 2) * 64 + 1);
  const int64_t M = 24, K = 192;
  EXPECT_TRUE(is_permutation_of_range(
      M * K, [&](int64_t i) { return block_major_k_offset(i / K, i % K, M); }));
  testbed::Rng rng(9);
  std::vector<uint16_t> w(M * K);
  for (auto& v : w) v = static_cast<uint16_t>(rng.integer(0, 65536));
  const std::vector<uint16_t> bmk = to_block_major_k(w.data(), M, K);
  EXPECT_EQ(bmk[64], w[1 * K + 0]);                     // [kb=0][m=1][0]
  EXPECT_EQ(bmk[(1 * M + 2) * 64 + 5], w[2 * K + 69]);  // [kb=1][m=2][5]
  EXPECT_EQ(from_block_major_k(bmk.data(), M, K), w);
  EXPECT_THROW(to_block_major_k(w.data(), M, 100), InvalidArgument);
}

// ---- Whole-matrix row permutation + swizzle: dequant through the physical view ------------------

TEST(WeightView, PhysicalNvfp4W1DequantizesToLogical) {
  // Quantize a logical W1 [2I, H], apply (a)+(b) to the packed rows and SF rows, 128x4-swizzle the
  // SFs, then read every logical element back through the physical maps.
  const int64_t I = 64, H = 128, rows = 2 * I, C = H / 16;
  testbed::Rng rng(21);
  std::vector<float> w(rows * H);
  for (float& v : w) v = rng.normal();
  const Nvfp4Matrix q = nvfp4_quantize_matrix(w.data(), rows, H, 448.f * 6.f / 4.f);
  const std::vector<float> logical =
      nvfp4_dequantize_matrix(q.packed.data(), q.sf.data(), rows, H, 4.f / (448.f * 6.f));
  const std::vector<int64_t> map = w1_row_map(I);
  std::vector<uint8_t> packed(q.packed.size(), 0xEE), sf_rows(q.sf.size(), 0xEE);
  permute_rows(q.packed.data(), packed.data(), rows, H / 2, map);
  permute_rows(q.sf.data(), sf_rows.data(), rows, C, map);
  const std::vector<uint8_t> sf = swizzle_sf(SfLayout::kR128C4, sf_rows.data(), rows, C);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = w1_physical_row(r, I);
    for (int64_t k = 0; k < H; ++k) {
      const uint8_t code = e2m1x2_unpack(packed[p * H / 2 + k / 2], static_cast<int>(k % 2));
      const float v = nvfp4_dequantize(code, sf[sf_offset_128x4(p, k / 16, C)], 4.f / 2688.f);
      ASSERT_EQ(v, logical[r * H + k]) << r << "," << k;
    }
  }
  // And the inverse transforms recover the logical bytes.
  std::vector<uint8_t> back(packed.size());
  unpermute_rows(packed.data(), back.data(), rows, H / 2, map);
  EXPECT_EQ(back, q.packed);
  const std::vector<uint8_t> sf_lin = unswizzle_sf(SfLayout::kR128C4, sf.data(), rows, C);
  std::vector<uint8_t> sf_back(sf_lin.size());
  unpermute_rows(sf_lin.data(), sf_back.data(), rows, C, map);
  EXPECT_EQ(sf_back, q.sf);
}

TEST(PermuteRows, RoundTripAndValidation) {
  const int64_t rows = 96, row_bytes = 10;
  const std::vector<uint8_t> src = random_bytes(rows * row_bytes, 33);
  const std::vector<int64_t> map = w2_row_map(rows);
  std::vector<uint8_t> dst(src.size()), back(src.size());
  permute_rows(src.data(), dst.data(), rows, row_bytes, map);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < row_bytes; ++b) {
      ASSERT_EQ(dst[shuffle32_dst_row(r) * row_bytes + b], src[r * row_bytes + b]);
    }
  }
  unpermute_rows(dst.data(), back.data(), rows, row_bytes, map);
  EXPECT_EQ(back, src);
  std::vector<int64_t> bad = map;
  bad[3] = bad[4];
  EXPECT_THROW(permute_rows(src.data(), dst.data(), rows, row_bytes, bad), InvalidArgument);
  EXPECT_THROW(permute_rows(src.data(), dst.data(), rows - 1, row_bytes, map), InvalidArgument);
  EXPECT_THROW(permute_rows(src.data(), const_cast<uint8_t*>(src.data()) + 5, rows, row_bytes, map),
               InvalidArgument);
}

TEST(Layouts, CheckedSfSizeMatchesAndNamesOverflow) {
  for (SfLayout layout : {SfLayout::kLinear, SfLayout::kR8C4, SfLayout::kR128C4}) {
    for (int64_t rows : {0, 1, 7, 8, 129, 4096}) {
      for (int64_t cols : {0, 1, 3, 4, 5, 192}) {
        EXPECT_EQ(checked_sf_size(layout, rows, cols, "s"), sf_size(layout, rows, cols));
      }
    }
  }
  // ceil_div(rows, 128) * 128 * ... used to wrap for huge rows.
  const int64_t big = int64_t{1} << 62;
  testbed::expect_error([&] { checked_sf_size(SfLayout::kR128C4, big, big, "output_scale"); },
                        "output_scale");
  testbed::expect_error(
      [&] { checked_sf_size(SfLayout::kR8C4, std::numeric_limits<int64_t>::max(), 4, "sf"); },
      "sf");
  testbed::expect_error([&] { checked_sf_size(SfLayout::kLinear, -1, 4, "sf"); }, "sf");
  std::vector<uint8_t> src(16), dst(16);
  testbed::expect_error([&] { permute_rows(src.data(), dst.data(), big, big, {}); }, "row_bytes");
}

}  // namespace
}  // namespace formats
}  // namespace cakemoe
