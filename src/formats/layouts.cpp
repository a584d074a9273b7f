// Host whole-matrix layout transforms over the index maps of layouts.h (spec stepfun §4.4).
#include "formats/layouts.h"

#include <cstring>
#include <string>

#include "core/check.h"
#include "core/checked.h"

namespace cakemoe {
namespace formats {
namespace {

void check_map(const std::vector<int64_t>& map, int64_t rows) {
  core::require(static_cast<int64_t>(map.size()) == rows, "dst_row_of",
                "must have one entry per row (" + std::to_string(rows) + "), got " +
                    std::to_string(map.size()));
  std::vector<char> seen(map.size(), 0);
  for (int64_t v : map) {
    core::require(v >= 0 && v < rows && !seen[v], "dst_row_of",
                  "must be a permutation of [0, " + std::to_string(rows) + ")");
    seen[v] = 1;
  }
}

void check_rows(const void* src, const void* dst, int64_t rows, int64_t row_bytes) {
  core::require(rows >= 0, "rows", "must be >= 0, got " + std::to_string(rows));
  core::require(row_bytes >= 0, "row_bytes", "must be >= 0, got " + std::to_string(row_bytes));
  const int64_t bytes = core::checked_mul(rows, row_bytes, "row_bytes", "rows * row_bytes");
  if (bytes == 0) return;
  core::require(src != nullptr, "src", "must not be null");
  core::require(dst != nullptr, "dst", "must not be null");
  const char* s = static_cast<const char*>(src);
  const char* d = static_cast<const char*>(dst);
  core::require(s + bytes <= d || d + bytes <= s, "dst", "must not overlap src");
}

void check_sf(const uint8_t* data, const char* name, int64_t rows, int64_t num_cols) {
  core::require(rows >= 0, "rows", "must be >= 0, got " + std::to_string(rows));
  core::require(num_cols >= 0, "num_cols", "must be >= 0, got " + std::to_string(num_cols));
  checked_sf_size(stepfun::SfLayout::kR128C4, rows, num_cols, "num_cols");  // the largest layout
  core::require(data != nullptr || rows * num_cols == 0, name, "must not be null");
}

void check_block_major(const uint16_t* src, int64_t M, int64_t K) {
  core::require(M >= 0, "M", "must be >= 0, got " + std::to_string(M));
  core::require(K >= 0 && K % kBlockMajorK == 0, "K",
                "must be a non-negative multiple of 64 (BlockMajorK, 128 bytes of bf16), got " +
                    std::to_string(K));
  core::require(src != nullptr || core::checked_mul(M, K, "K", "M * K") == 0, "src",
                "must not be null");
}

}  // namespace

int64_t checked_sf_size(stepfun::SfLayout layout, int64_t rows, int64_t num_cols,
                        const std::string& arg) {
  core::require(rows >= 0 && num_cols >= 0, arg,
                "scale-factor rows and columns must be >= 0, got [" + std::to_string(rows) + ", " +
                    std::to_string(num_cols) + "]");
  const int64_t row_pad = layout == stepfun::SfLayout::kR8C4     ? 8
                          : layout == stepfun::SfLayout::kR128C4 ? 128
                                                                 : 1;
  const int64_t col_pad = layout == stepfun::SfLayout::kLinear ? 1 : 4;
  // NOTE: ceil(x / p) * p written as x / p + (x % p != 0): x + p - 1 may overflow.
  const int64_t padded_rows =
      core::checked_mul(rows / row_pad + (rows % row_pad != 0), row_pad, arg, "the padded SF rows");
  const int64_t padded_cols = core::checked_mul(num_cols / col_pad + (num_cols % col_pad != 0),
                                                col_pad, arg, "the padded SF columns");
  return core::checked_mul(padded_rows, padded_cols, arg, "the scale-factor bytes");
}

std::vector<int64_t> w1_row_map(int64_t I) {
  core::require(I >= 0 && I % 16 == 0, "I",
                "must be a non-negative multiple of 16 (2I rows in blocks of 32), got " +
                    std::to_string(I));
  core::checked_mul(I, 2, "I", "2I");
  std::vector<int64_t> map(static_cast<size_t>(2 * I));
  for (int64_t r = 0; r < 2 * I; ++r) map[r] = w1_physical_row(r, I);
  return map;
}

std::vector<int64_t> w2_row_map(int64_t rows) {
  core::require(rows >= 0 && rows % kShuffleBlockRows == 0, "rows",
                "must be a non-negative multiple of 32, got " + std::to_string(rows));
  std::vector<int64_t> map(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) map[r] = w2_physical_row(r);
  return map;
}

std::vector<int64_t> invert_row_map(const std::vector<int64_t>& map) {
  const int64_t rows = static_cast<int64_t>(map.size());
  check_map(map, rows);
  std::vector<int64_t> inverse(map.size());
  for (int64_t r = 0; r < rows; ++r) inverse[map[r]] = r;
  return inverse;
}

void permute_rows(const void* src, void* dst, int64_t rows, int64_t row_bytes,
                  const std::vector<int64_t>& dst_row_of) {
  check_rows(src, dst, rows, row_bytes);
  check_map(dst_row_of, rows);
  if (row_bytes == 0) return;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + dst_row_of[r] * row_bytes, s + r * row_bytes, static_cast<size_t>(row_bytes));
  }
}

void unpermute_rows(const void* src, void* dst, int64_t rows, int64_t row_bytes,
                    const std::vector<int64_t>& dst_row_of) {
  check_rows(src, dst, rows, row_bytes);
  check_map(dst_row_of, rows);
  if (row_bytes == 0) return;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + r * row_bytes, s + dst_row_of[r] * row_bytes, static_cast<size_t>(row_bytes));
  }
}

std::vector<uint8_t> swizzle_sf(stepfun::SfLayout layout, const uint8_t* linear, int64_t rows,
                                int64_t num_cols) {
  check_sf(linear, "linear", rows, num_cols);
  std::vector<uint8_t> out(static_cast<size_t>(sf_size(layout, rows, num_cols)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < num_cols; ++c) {
      out[sf_offset(layout, r, c, num_cols)] = linear[r * num_cols + c];
    }
  }
  return out;
}

std::vector<uint8_t> unswizzle_sf(stepfun::SfLayout layout, const uint8_t* swizzled, int64_t rows,
                                  int64_t num_cols) {
  check_sf(swizzled, "swizzled", rows, num_cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * num_cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < num_cols; ++c) {
      out[r * num_cols + c] = swizzled[sf_offset(layout, r, c, num_cols)];
    }
  }
  return out;
}

std::vector<uint16_t> to_block_major_k(const uint16_t* src, int64_t M, int64_t K) {
  check_block_major(src, M, K);
  std::vector<uint16_t> out(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) out[block_major_k_offset(m, k, M)] = src[m * K + k];
  }
  return out;
}

std::vector<uint16_t> from_block_major_k(const uint16_t* src, int64_t M, int64_t K) {
  check_block_major(src, M, K);
  std::vector<uint16_t> out(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) out[m * K + k] = src[block_major_k_offset(m, k, M)];
  }
  return out;
}

}  // namespace formats
}  // namespace cakemoe
