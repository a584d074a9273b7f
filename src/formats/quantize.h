// Block quantizers and dequantizers (spec stepfun §4.1, §5.2, §6).
// The block rules are CAKEMOE_HD so the CPU reference and CUDA kernels share one definition; the
// whole-matrix helpers at the bottom are host only (quantize.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/macros.h"
#include "formats/codecs.h"

namespace cakemoe {
namespace formats {

constexpr int kNvfp4Block = 16;  ///< elements per e4m3 scale (NVFP4)
constexpr int kMxfp8Block = 32;  ///< elements per ue8m0 scale (MXFP8)

/// max_i |x_i| over n values (NaN ignored).
CAKEMOE_HD float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = max_ignore_nan(amax, abs_bits(x[i]));
  return amax;
}

/// Writes 16 zero codes (8 bytes) and a zero scale.
CAKEMOE_HD void nvfp4_zero_block16(uint8_t* packed8, uint8_t* sf) {
  for (int i = 0; i < kNvfp4Block / 2; ++i) packed8[i] = 0;
  *sf = 0;
}

/// Encodes 16 values with a per-element multiplier `scale` into 8 packed bytes.
CAKEMOE_HD void nvfp4_pack_block16(const float* x, float scale, uint8_t* packed8) {
  for (int i = 0; i < kNvfp4Block / 2; ++i) {
    packed8[i] = e2m1x2_pack(e2m1_from_float(mul_rn(x[2 * i], scale)),
                             e2m1_from_float(mul_rn(x[2 * i + 1], scale)));
  }
}

/// NVFP4 with a global encode scale (spec §4.1, §6):
///   sf = e4m3(enc * (vec_max * rcp_rn(6))); scale = rcp_rn(float(sf) * rcp_rn(enc));
///   q_i = e2m1(x_i * scale). vec_max == 0 or sf == 0 -> sf byte 0 and all codes 0.
/// NOTE: a zero row has enc = +inf (spec §6); the vec_max guard keeps inf * 0 out of the SF.
CAKEMOE_HD void nvfp4_quantize_block16(const float* x, float global_encode, uint8_t* packed8,
                                       uint8_t* sf) {
  const float vec_max = block_amax(x, kNvfp4Block);
  if (vec_max == 0.0f) {
    nvfp4_zero_block16(packed8, sf);
    return;
  }
  const uint8_t sf_code = e4m3_from_float(mul_rn(global_encode, mul_rn(vec_max, rcp_rn(6.0f))));
  const float sf_value = e4m3_to_float(sf_code);
  if (sf_value == 0.0f) {  // underflowed scale: the block encodes as zeros (FlashInfer: scale 0)
    nvfp4_zero_block16(packed8, sf);
    return;
  }
  const float scale = rcp_rn(mul_rn(sf_value, rcp_rn(global_encode)));
  nvfp4_pack_block16(x, scale, packed8);
  *sf = sf_code;
}

/// NVFP4 FC1-epilogue rule (spec §5.2, no global scale):
///   sf = e4m3(vec_max * rcp_rn(6)); q_i = e2m1(v_i * rcp_rn(float(sf))); sf == 0 -> codes 0.
CAKEMOE_HD void nvfp4_quantize_block16_unit(const float* v, uint8_t* packed8, uint8_t* sf) {
  const float vec_max = block_amax(v, kNvfp4Block);
  const uint8_t sf_code = e4m3_from_float(mul_rn(vec_max, rcp_rn(6.0f)));
  const float sf_value = e4m3_to_float(sf_code);
  if (vec_max == 0.0f || sf_value == 0.0f) {
    nvfp4_zero_block16(packed8, sf);
    return;
  }
  nvfp4_pack_block16(v, rcp_rn(sf_value), packed8);
  *sf = sf_code;
}

/// Per-token NVFP4 of one row (spec §6, and the nvfp4_bf16tok activation prep of §4.3):
///   p = row_amax * global_scale_inv (returned: the fp32 decode scale); enc = rcp_rn(p);
///   each 16-block by nvfp4_quantize_block16(enc). `cols` % 16 == 0; writes cols/2 packed bytes
///   and cols/16 linear SF bytes (`sf_stride` apart, 1 for a linear row).
CAKEMOE_HD float nvfp4_per_token_quantize_row(const float* x, int64_t cols, float global_scale_inv,
                                              uint8_t* packed, uint8_t* sf, int64_t sf_stride = 1) {
  float row_amax = 0.0f;
  for (int64_t j = 0; j < cols; ++j) row_amax = max_ignore_nan(row_amax, abs_bits(x[j]));
  const float p = mul_rn(row_amax, global_scale_inv);
  const float enc = rcp_rn(p);
  for (int64_t b = 0; b < cols / kNvfp4Block; ++b) {
    nvfp4_quantize_block16(x + b * kNvfp4Block, enc, packed + b * (kNvfp4Block / 2),
                           sf + b * sf_stride);
  }
  return p;
}

/// 2^(127 - code) exactly, the MXFP8 encode multiplier of ue8m0 `code` in [0, 254].
CAKEMOE_HD float mxfp8_encode_multiplier(uint8_t code) {
  return ue8m0_to_float(static_cast<uint8_t>(254 - code));
}

/// MXFP8 (spec §5.2): amax with denormal amax flushed to 0;
///   code = ue8m0_round_up((amax != 0 ? amax : 448) / 448); q_i = e4m3(x_i * 2^-(code-127)).
/// NaN amax (all inputs NaN) gives code 0xFF and NaN codes.
CAKEMOE_HD void mxfp8_quantize_block32(const float* x, uint8_t* q32, uint8_t* code) {
  float amax = block_amax(x, kMxfp8Block);
  if (amax < bits_to_float(0x00800000u)) amax = 0.0f;  // NOTE: spec §5.2 flushes denormal amax
  const uint8_t c = ue8m0_from_float_round_up(div_rn(amax != 0.0f ? amax : kE4m3Max, kE4m3Max));
  const float multiplier = c == 0xFFu ? ue8m0_to_float(0xFFu) : mxfp8_encode_multiplier(c);
  for (int i = 0; i < kMxfp8Block; ++i) q32[i] = e4m3_from_float(mul_rn(x[i], multiplier));
  *code = c;
}

/// FP8 per-tensor: q = e4m3(x * global_encode).
CAKEMOE_HD uint8_t fp8_quantize(float x, float global_encode) {
  return e4m3_from_float(mul_rn(x, global_encode));
}

/// NVFP4 element value: (e2m1 * float(sf)) * global_decode.
CAKEMOE_HD float nvfp4_dequantize(uint8_t code4, uint8_t sf, float global_decode) {
  return mul_rn(mul_rn(e2m1_to_float(code4), e4m3_to_float(sf)), global_decode);
}

/// MXFP8 element value: e4m3 * 2^(code-127).
CAKEMOE_HD float mxfp8_dequantize(uint8_t q, uint8_t code) {
  return mul_rn(e4m3_to_float(q), ue8m0_to_float(code));
}

/// FP8 per-tensor element value: e4m3 * global_decode.
CAKEMOE_HD float fp8_dequantize(uint8_t q, float global_decode) {
  return mul_rn(e4m3_to_float(q), global_decode);
}

// ---- Host whole-matrix helpers (row-major float [rows, cols]; SFs in linear layout) -------------
// Every helper validates its arguments (cols % block == 0, rows >= 0, non-null pointers) and
// throws cakemoe::InvalidArgument before writing. Batched tensors are the caller's loop.

/// NVFP4 matrix: packed e2m1 [rows, cols/2] and linear e4m3 SF [rows, cols/16].
struct Nvfp4Matrix {
  std::vector<uint8_t> packed;
  std::vector<uint8_t> sf;
};

/// One global encode scale per row (`row_global_encode` has `rows` entries).
Nvfp4Matrix nvfp4_quantize_matrix(const float* x, int64_t rows, int64_t cols,
                                  const float* row_global_encode);
/// One global encode scale for the whole matrix.
Nvfp4Matrix nvfp4_quantize_matrix(const float* x, int64_t rows, int64_t cols, float global_encode);
/// The FC1-epilogue rule (nvfp4_quantize_block16_unit) over a matrix.
Nvfp4Matrix nvfp4_quantize_matrix_unit(const float* x, int64_t rows, int64_t cols);
/// Per-token rule of spec §6: fills `row_decode_scale` (rows entries) with p of each row.
Nvfp4Matrix nvfp4_per_token_quantize_matrix(const float* x, int64_t rows, int64_t cols,
                                            float global_scale_inv,
                                            std::vector<float>* row_decode_scale);

/// Inverses: float [rows, cols]. `row_global_decode` has `rows` entries.
std::vector<float> nvfp4_dequantize_matrix(const uint8_t* packed, const uint8_t* sf, int64_t rows,
                                           int64_t cols, const float* row_global_decode);
std::vector<float> nvfp4_dequantize_matrix(const uint8_t* packed, const uint8_t* sf, int64_t rows,
                                           int64_t cols, float global_decode);

/// MXFP8 matrix: e4m3 [rows, cols] and linear ue8m0 SF [rows, cols/32].
struct Mxfp8Matrix {
  std::vector<uint8_t> q;
  std::vector<uint8_t> sf;
};

Mxfp8Matrix mxfp8_quantize_matrix(const float* x, int64_t rows, int64_t cols);
std::vector<float> mxfp8_dequantize_matrix(const uint8_t* q, const uint8_t* sf, int64_t rows,
                                           int64_t cols);

/// FP8 per-tensor: e4m3 [rows, cols].
std::vector<uint8_t> fp8_quantize_matrix(const float* x, int64_t rows, int64_t cols,
                                         float global_encode);
std::vector<float> fp8_dequantize_matrix(const uint8_t* q, int64_t rows, int64_t cols,
                                         float global_decode);

}  // namespace formats
}  // namespace cakemoe
