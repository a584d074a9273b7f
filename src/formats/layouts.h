// Weight and scale-factor layouts (spec stepfun §4.4), every map with its inverse.
// Index maps are CAKEMOE_HD; whole-matrix transforms are host only (layouts.cpp) and validate
// their arguments (typed InvalidArgument naming the argument) before writing anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/macros.h"

namespace cakemoe {
namespace formats {

constexpr int kShuffleBlockRows = 32;  ///< §4.4 (b): rows permuted within aligned blocks of 32
constexpr int kBlockMajorK = 64;       ///< §4.4 (d): bk = 128 bytes = 64 bf16 elements

// ---- (a) gated interleave of W1 rows [up; gate] -> [up0, gate0, up1, gate1, ...] ----------------

/// Destination row of logical W1 row `logical_row` in [0, 2I).
CAKEMOE_HD int64_t gated_interleave_dst_row(int64_t logical_row, int64_t I) {
  return logical_row < I ? 2 * logical_row : 2 * (logical_row - I) + 1;
}

/// Logical W1 row stored at interleaved row `dst_row` in [0, 2I).
CAKEMOE_HD int64_t gated_interleave_src_row(int64_t dst_row, int64_t I) {
  return (dst_row & 1) ? I + (dst_row >> 1) : (dst_row >> 1);
}

// ---- (b) shuffle for the transposed-MMA epilogue (srcToDstBlk32RowMap) --------------------------

/// Offset inside a 32-row block where source offset `s` moves: 8*(s%4) + s/4.
CAKEMOE_HD int shuffle32_dst_offset(int s) { return 8 * (s % 4) + s / 4; }

/// Inverse of shuffle32_dst_offset: 4*(d%8) + d/8.
CAKEMOE_HD int shuffle32_src_offset(int d) { return 4 * (d % 8) + d / 8; }

CAKEMOE_HD int64_t shuffle32_dst_row(int64_t row) {
  return (row / kShuffleBlockRows) * kShuffleBlockRows +
         shuffle32_dst_offset(static_cast<int>(row % kShuffleBlockRows));
}

CAKEMOE_HD int64_t shuffle32_src_row(int64_t row) {
  return (row / kShuffleBlockRows) * kShuffleBlockRows +
         shuffle32_src_offset(static_cast<int>(row % kShuffleBlockRows));
}

// ---- Composite row maps of the weight views -----------------------------------------------------

/// Physical W1 row of logical row `logical_row` ((a) then (b)); requires I % 16 == 0.
CAKEMOE_HD int64_t w1_physical_row(int64_t logical_row, int64_t I) {
  return shuffle32_dst_row(gated_interleave_dst_row(logical_row, I));
}

/// Logical W1 row stored at physical row `physical_row`.
CAKEMOE_HD int64_t w1_logical_row(int64_t physical_row, int64_t I) {
  return gated_interleave_src_row(shuffle32_src_row(physical_row), I);
}

/// Physical W2 row of logical row (only (b)); requires rows % 32 == 0.
CAKEMOE_HD int64_t w2_physical_row(int64_t logical_row) { return shuffle32_dst_row(logical_row); }
CAKEMOE_HD int64_t w2_logical_row(int64_t physical_row) { return shuffle32_src_row(physical_row); }

// ---- Scale-factor layouts: (c) 128x4, (e) r8c4, linear ------------------------------------------

CAKEMOE_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// (c) byte offset of SF (r, c) in the 128x4 swizzle of a [rows, num_cols] SF matrix.
CAKEMOE_HD int64_t sf_offset_128x4(int64_t r, int64_t c, int64_t num_cols) {
  return (r / 128) * (ceil_div(num_cols, 4) * 512) + (c / 4) * 512 + (r % 32) * 16 +
         ((r % 128) / 32) * 4 + (c % 4);
}

/// (c) bytes of the 128x4 swizzle (rows padded to 128, columns to 4); the per-expert stride.
CAKEMOE_HD int64_t sf_size_128x4(int64_t rows, int64_t num_cols) {
  return ceil_div(rows, 128) * 128 * ceil_div(num_cols, 4) * 4;
}

/// (e) byte offset of SF (r, c) in the r8c4 swizzle.
CAKEMOE_HD int64_t sf_offset_r8c4(int64_t r, int64_t c, int64_t num_cols) {
  return (r / 8) * (ceil_div(num_cols, 4) * 32) + (c / 4) * 32 + (r % 8) * 4 + (c % 4);
}

/// (e) bytes of the r8c4 swizzle (rows padded to 8, columns to 4).
CAKEMOE_HD int64_t sf_size_r8c4(int64_t rows, int64_t num_cols) {
  return ceil_div(rows, 8) * 8 * ceil_div(num_cols, 4) * 4;
}

/// Byte offset of SF (r, c) in `layout` (kR128C4 = the 128x4 swizzle applied to activation rows).
CAKEMOE_HD int64_t sf_offset(stepfun::SfLayout layout, int64_t r, int64_t c, int64_t num_cols) {
  switch (layout) {
    case stepfun::SfLayout::kR8C4:
      return sf_offset_r8c4(r, c, num_cols);
    case stepfun::SfLayout::kR128C4:
      return sf_offset_128x4(r, c, num_cols);
    default:
      return r * num_cols + c;
  }
}

/// Bytes of a [rows, num_cols] SF matrix in `layout` (padding included).
CAKEMOE_HD int64_t sf_size(stepfun::SfLayout layout, int64_t rows, int64_t num_cols) {
  switch (layout) {
    case stepfun::SfLayout::kR8C4:
      return sf_size_r8c4(rows, num_cols);
    case stepfun::SfLayout::kR128C4:
      return sf_size_128x4(rows, num_cols);
    default:
      return rows * num_cols;
  }
}

/// Host: sf_size(layout, rows, num_cols) with overflow-checked arithmetic; InvalidArgument(arg)
/// for negative sizes or a size that does not fit in int64.
int64_t checked_sf_size(stepfun::SfLayout layout, int64_t rows, int64_t num_cols,
                        const std::string& arg);

// ---- (d) BlockMajorK ----------------------------------------------------------------------------

/// Element offset of (m, k) of a row-major [M, K] bf16 matrix viewed as [K/64, M, 64].
CAKEMOE_HD int64_t block_major_k_offset(int64_t m, int64_t k, int64_t M) {
  return ((k / kBlockMajorK) * M + m) * kBlockMajorK + (k % kBlockMajorK);
}

// ---- Host whole-matrix transforms ---------------------------------------------------------------
// Batched over experts is the caller's loop: weights have a per-expert stride of rows*row_bytes,
// 128x4 SFs of sf_size_128x4(rows, C), r8c4 SFs of sf_size_r8c4(rows, C).

/// dst_row_of[r] = physical row of logical W1 row r, for r in [0, 2I). Requires I % 16 == 0.
std::vector<int64_t> w1_row_map(int64_t I);
/// dst_row_of[r] = physical row of logical W2 row r, for r in [0, rows). Requires rows % 32 == 0.
std::vector<int64_t> w2_row_map(int64_t rows);
/// The inverse permutation (throws unless `map` is a permutation of [0, size)).
std::vector<int64_t> invert_row_map(const std::vector<int64_t>& map);

/// dst row dst_row_of[r] = src row r of a [rows, row_bytes] byte matrix (any element type:
/// row_bytes = cols * sizeof(element)). `src` and `dst` must not overlap.
void permute_rows(const void* src, void* dst, int64_t rows, int64_t row_bytes,
                  const std::vector<int64_t>& dst_row_of);
/// Inverse of permute_rows with the same map: dst row r = src row dst_row_of[r].
void unpermute_rows(const void* src, void* dst, int64_t rows, int64_t row_bytes,
                    const std::vector<int64_t>& dst_row_of);

/// Linear SF [rows, num_cols] -> `layout` (sf_size(layout, rows, num_cols) bytes, pad bytes 0).
/// kR128C4 has no row-count requirement here (the padding is explicit).
std::vector<uint8_t> swizzle_sf(stepfun::SfLayout layout, const uint8_t* linear, int64_t rows,
                                int64_t num_cols);
/// Inverse: the [rows, num_cols] linear SF from a `layout` buffer (padding ignored).
std::vector<uint8_t> unswizzle_sf(stepfun::SfLayout layout, const uint8_t* swizzled, int64_t rows,
                                  int64_t num_cols);

/// bf16 [M, K] row-major -> BlockMajorK [K/64, M, 64]. Requires K % 64 == 0.
std::vector<uint16_t> to_block_major_k(const uint16_t* src, int64_t M, int64_t K);
/// Inverse of to_block_major_k.
std::vector<uint16_t> from_block_major_k(const uint16_t* src, int64_t M, int64_t K);

}  // namespace formats
}  // namespace cakemoe
