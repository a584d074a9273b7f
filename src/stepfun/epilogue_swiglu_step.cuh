// The FC1 epilogue of spec stepfun §5.2, shared by the SIMT and sm90 FC1 kernels: SwiGLUStep with
// the per-expert clamp on one (up, gate) accumulator pair in the CPU reference's operation order,
// and the store of a group of 16 (32 for mxfp8) features of one permuted row in the family's
// FC2-input format (nvfp4: e2m1 + e4m3 SF, mxfp8: e4m3 + ue8m0 SF, fp8: e4m3, bf16).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "formats/codecs.h"
#include "formats/layouts.h"
#include "formats/quantize.h"
#include "stepfun/gemm_params.h"

namespace cakemoe {
namespace stepfun {
namespace gemm_kernels {

constexpr int kFeatures = 64;  ///< output features per FC1 CTA (spec §5.1 DECISION)

/// std::min(std::max(x, -l), l) with the same NaN behaviour as the reference.
__device__ __forceinline__ float clamp_symmetric(float x, float l) {
  const float lo = -l;
  const float m = x < lo ? lo : x;
  return l < m ? l : m;
}

__device__ __forceinline__ float min_like_std(float a, float b) { return b < a ? b : a; }

/// The accurate fp32 sigmoid of the reference epilogue.
__device__ __forceinline__ float sigmoid_fp32(float x) { return 1.0f / (1.0f + expf(-x)); }

/// SwiGLUStep epilogue of spec §5.2 for one (up, gate) accumulator pair, in the reference's order.
template <Family F>
__device__ __forceinline__ float epilogue_value(float up, float g, float sg, float sc, float cl) {
  if constexpr (F == Family::kBF16 || F == Family::kMXFP8) {
    return clamp_symmetric(up, cl) * min_like_std(g * sigmoid_fp32(g), cl);
  } else {
    const float u = clamp_symmetric(up, cl);
    const float a = min_like_std(g * sigmoid_fp32(g * sg), cl);
    return u * sc * sg * a;
  }
}

__device__ __forceinline__ uint32_t pack4(const uint8_t* b) {
  return uint32_t(b[0]) | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
}

/// Stores G = 16 (32 for mxfp8) features [f, f + G) of permuted row `row` in the family format.
template <Family F, int G>
__device__ __forceinline__ void store_features(const Fc1Params& p, int64_t row, int64_t f,
                                               const float* v) {
  const int64_t inter = p.intermediate;
  if constexpr (F == Family::kNVFP4) {
    uint8_t packed[8];
    uint8_t sf;
    formats::nvfp4_quantize_block16_unit(v, packed, &sf);
    auto* out = static_cast<uint8_t*>(p.output) + row * (inter / 2) + f / 2;
    *reinterpret_cast<uint2*>(out) = make_uint2(pack4(packed), pack4(packed + 4));
    p.output_scale[formats::sf_offset(p.output_scale_layout, row, f / 16, inter / 16)] = sf;
  } else if constexpr (F == Family::kMXFP8) {
    uint8_t q[32];
    uint8_t code;
    formats::mxfp8_quantize_block32(v, q, &code);
    auto* out = reinterpret_cast<uint4*>(static_cast<uint8_t*>(p.output) + row * inter + f);
    out[0] = make_uint4(pack4(q), pack4(q + 4), pack4(q + 8), pack4(q + 12));
    out[1] = make_uint4(pack4(q + 16), pack4(q + 20), pack4(q + 24), pack4(q + 28));
    p.output_scale[formats::sf_offset(p.output_scale_layout, row, f / 32, inter / 32)] = code;
  } else if constexpr (F == Family::kFP8) {
    uint8_t q[16];
    for (int j = 0; j < 16; ++j) q[j] = formats::e4m3_from_float(v[j]);
    *reinterpret_cast<uint4*>(static_cast<uint8_t*>(p.output) + row * inter + f) =
        make_uint4(pack4(q), pack4(q + 4), pack4(q + 8), pack4(q + 12));
  } else {
    uint32_t w[8];
    for (int j = 0; j < 8; ++j) {
      w[j] = uint32_t(formats::bf16_from_float(v[2 * j])) |
             (uint32_t(formats::bf16_from_float(v[2 * j + 1])) << 16);
    }
    auto* out = reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.output) + row * inter + f);
    out[0] = make_uint4(w[0], w[1], w[2], w[3]);
    out[1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
}

}  // namespace gemm_kernels
}  // namespace stepfun
}  // namespace cakemoe
