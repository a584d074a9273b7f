// Host whole-matrix quantizers: loops over the CAKEMOE_HD block rules of quantize.h.
#include "formats/quantize.h"

#include <string>

#include "core/check.h"
#include "core/parallel.h"

namespace cakemoe {
namespace formats {
namespace {

void check_matrix(const void* data, const char* name, int64_t rows, int64_t cols, int block) {
  core::require(rows >= 0, "rows", "must be >= 0, got " + std::to_string(rows));
  core::require(cols >= 0 && cols % block == 0, "cols",
                "must be a non-negative multiple of " + std::to_string(block) + ", got " +
                    std::to_string(cols));
  core::require(data != nullptr || rows * cols == 0, name, "must not be null");
}

size_t count(int64_t rows, int64_t per_row) { return static_cast<size_t>(rows * per_row); }

// Shared loop of the NVFP4 variants; `block_rule(row, x16, packed8, sf)` encodes one block.
template <typename BlockRule>
Nvfp4Matrix nvfp4_rows(const float* x, int64_t rows, int64_t cols, BlockRule block_rule) {
  Nvfp4Matrix out;
  out.packed.assign(count(rows, cols / 2), 0);
  out.sf.assign(count(rows, cols / kNvfp4Block), 0);
  const int64_t blocks = cols / kNvfp4Block;
  core::parallel_for(rows, [&](int64_t r) {
    for (int64_t b = 0; b < blocks; ++b) {
      block_rule(r, x + r * cols + b * kNvfp4Block, &out.packed[r * (cols / 2) + b * 8],
                 &out.sf[r * blocks + b]);
    }
  });
  return out;
}

}  // namespace

Nvfp4Matrix nvfp4_quantize_matrix(const float* x, int64_t rows, int64_t cols,
                                  const float* row_global_encode) {
  check_matrix(x, "x", rows, cols, kNvfp4Block);
  core::require(row_global_encode != nullptr || rows == 0, "row_global_encode", "must not be null");
  return nvfp4_rows(x, rows, cols, [&](int64_t r, const float* blk, uint8_t* packed, uint8_t* sf) {
    nvfp4_quantize_block16(blk, row_global_encode[r], packed, sf);
  });
}

Nvfp4Matrix nvfp4_quantize_matrix(const float* x, int64_t rows, int64_t cols,
                                  float global_encode) {
  check_matrix(x, "x", rows, cols, kNvfp4Block);
  return nvfp4_rows(x, rows, cols, [&](int64_t, const float* blk, uint8_t* packed, uint8_t* sf) {
    nvfp4_quantize_block16(blk, global_encode, packed, sf);
  });
}

Nvfp4Matrix nvfp4_quantize_matrix_unit(const float* x, int64_t rows, int64_t cols) {
  check_matrix(x, "x", rows, cols, kNvfp4Block);
  return nvfp4_rows(x, rows, cols, [&](int64_t, const float* blk, uint8_t* packed, uint8_t* sf) {
    nvfp4_quantize_block16_unit(blk, packed, sf);
  });
}

Nvfp4Matrix nvfp4_per_token_quantize_matrix(const float* x, int64_t rows, int64_t cols,
                                            float global_scale_inv,
                                            std::vector<float>* row_decode_scale) {
  check_matrix(x, "x", rows, cols, kNvfp4Block);
  core::require(row_decode_scale != nullptr, "row_decode_scale", "must not be null");
  Nvfp4Matrix out;
  out.packed.assign(count(rows, cols / 2), 0);
  out.sf.assign(count(rows, cols / kNvfp4Block), 0);
  row_decode_scale->assign(static_cast<size_t>(rows), 0.0f);
  core::parallel_for(rows, [&](int64_t r) {
    (*row_decode_scale)[r] =
        nvfp4_per_token_quantize_row(x + r * cols, cols, global_scale_inv,
                                     &out.packed[r * (cols / 2)], &out.sf[r * (cols / 16)]);
  });
  return out;
}

std::vector<float> nvfp4_dequantize_matrix(const uint8_t* packed, const uint8_t* sf, int64_t rows,
                                           int64_t cols, const float* row_global_decode) {
  check_matrix(packed, "packed", rows, cols, kNvfp4Block);
  check_matrix(sf, "sf", rows, cols, kNvfp4Block);
  core::require(row_global_decode != nullptr || rows == 0, "row_global_decode", "must not be null");
  std::vector<float> out(count(rows, cols));
  core::parallel_for(rows, [&](int64_t r) {
    for (int64_t j = 0; j < cols; ++j) {
      const uint8_t byte = packed[r * (cols / 2) + j / 2];
      out[r * cols + j] = nvfp4_dequantize(e2m1x2_unpack(byte, static_cast<int>(j & 1)),
                                           sf[r * (cols / 16) + j / 16], row_global_decode[r]);
    }
  });
  return out;
}

std::vector<float> nvfp4_dequantize_matrix(const uint8_t* packed, const uint8_t* sf, int64_t rows,
                                           int64_t cols, float global_decode) {
  const std::vector<float> decode(static_cast<size_t>(rows > 0 ? rows : 0), global_decode);
  return nvfp4_dequantize_matrix(packed, sf, rows, cols, decode.data());
}

Mxfp8Matrix mxfp8_quantize_matrix(const float* x, int64_t rows, int64_t cols) {
  check_matrix(x, "x", rows, cols, kMxfp8Block);
  Mxfp8Matrix out;
  out.q.assign(count(rows, cols), 0);
  out.sf.assign(count(rows, cols / kMxfp8Block), 0);
  const int64_t blocks = cols / kMxfp8Block;
  core::parallel_for(rows, [&](int64_t r) {
    for (int64_t b = 0; b < blocks; ++b) {
      mxfp8_quantize_block32(x + r * cols + b * kMxfp8Block, &out.q[r * cols + b * kMxfp8Block],
                             &out.sf[r * blocks + b]);
    }
  });
  return out;
}

std::vector<float> mxfp8_dequantize_matrix(const uint8_t* q, const uint8_t* sf, int64_t rows,
                                           int64_t cols) {
  check_matrix(q, "q", rows, cols, kMxfp8Block);
  check_matrix(sf, "sf", rows, cols, kMxfp8Block);
  std::vector<float> out(count(rows, cols));
  core::parallel_for(rows, [&](int64_t r) {
    for (int64_t j = 0; j < cols; ++j) {
      out[r * cols + j] = mxfp8_dequantize(q[r * cols + j], sf[r * (cols / kMxfp8Block) + j / 32]);
    }
  });
  return out;
}

std::vector<uint8_t> fp8_quantize_matrix(const float* x, int64_t rows, int64_t cols,
                                         float global_encode) {
  check_matrix(x, "x", rows, cols, 1);
  std::vector<uint8_t> out(count(rows, cols));
  for (size_t i = 0; i < out.size(); ++i) out[i] = fp8_quantize(x[i], global_encode);
  return out;
}

std::vector<float> fp8_dequantize_matrix(const uint8_t* q, int64_t rows, int64_t cols,
                                         float global_decode) {
  check_matrix(q, "q", rows, cols, 1);
  std::vector<float> out(count(rows, cols));
  for (size_t i = 0; i < out.size(); ++i) out[i] = fp8_dequantize(q[i], global_decode);
  return out;
}

}  // namespace formats
}  // namespace cakemoe
