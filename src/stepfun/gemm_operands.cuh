// Device readers of the GEMM operands (spec stepfun §4.2, §4.4): 8 consecutive K elements of one
// row, decoded to accumulator units exactly as the CPU reference readers do (nvfp4* e2m1 * e4m3
// sf, fp8 e4m3, mxfp8 e4m3 * 2^(sf-127), bf16 as is; every value exact in fp32).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cakemoe/stepfun.h"
#include "formats/codecs.h"
#include "formats/layouts.h"

namespace cakemoe {
namespace stepfun {
namespace gemm_kernels {

/// Storage format of an operand (nvfp4_bf16tok stores nvfp4).
enum class Fmt : uint8_t { kBF16, kFP8, kMXFP8, kNVFP4 };

constexpr Fmt fmt_of(Family f) {
  return f == Family::kBF16    ? Fmt::kBF16
         : f == Family::kFP8   ? Fmt::kFP8
         : f == Family::kMXFP8 ? Fmt::kMXFP8
                               : Fmt::kNVFP4;
}

/// A row-major operand: activations ([rows, K], scales in `layout`) or one expert of a quantized
/// weight (rows = physical rows, scales in the 128x4 swizzle = kR128C4 over those rows).
struct RowOperand {
  const uint8_t* data;
  const uint8_t* scale;
  SfLayout layout;
  int64_t cols;  ///< K
};

__device__ __forceinline__ void unpack_bf16x8(uint4 v, float* out) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = formats::bf16_to_float(static_cast<uint16_t>(w[i] & 0xFFFFu));
    out[2 * i + 1] = formats::bf16_to_float(static_cast<uint16_t>(w[i] >> 16));
  }
}

__device__ __forceinline__ void unpack_e4m3x8(uint2 v, float* out) {
  for (int i = 0; i < 4; ++i) {
    out[i] = formats::e4m3_to_float(static_cast<uint8_t>(v.x >> (8 * i)));
    out[4 + i] = formats::e4m3_to_float(static_cast<uint8_t>(v.y >> (8 * i)));
  }
}

/// The raw bytes of 8 consecutive K elements (bf16: 16 bytes, e4m3: 8, e2m1: 4) and their block
/// scale byte: fetched one K step ahead, decoded after the current step's math.
struct Raw8 {
  uint4 bits;
  uint8_t sf;
};

/// Elements [k0, k0 + 8) of row `row` (k0 % 8 == 0), raw.
template <Fmt F>
__device__ __forceinline__ Raw8 fetch_row8(const RowOperand& op, int64_t row, int64_t k0) {
  Raw8 r{};
  if constexpr (F == Fmt::kBF16) {
    r.bits = __ldg(reinterpret_cast<const uint4*>(op.data + (row * op.cols + k0) * 2));
  } else if constexpr (F == Fmt::kFP8 || F == Fmt::kMXFP8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(op.data + row * op.cols + k0));
    r.bits.x = v.x;
    r.bits.y = v.y;
    if constexpr (F == Fmt::kMXFP8) {
      r.sf = op.scale[formats::sf_offset(op.layout, row, k0 / 32, op.cols / 32)];
    }
  } else {
    r.bits.x = __ldg(reinterpret_cast<const uint32_t*>(op.data + (row * op.cols + k0) / 2));
    r.sf = op.scale[formats::sf_offset(op.layout, row, k0 / 16, op.cols / 16)];
  }
  return r;
}

/// Raw8 -> 8 values in accumulator units (the CPU readers' arithmetic). Raw8{} decodes to zeros.
template <Fmt F>
__device__ __forceinline__ void decode8(const Raw8& r, float* out) {
  if constexpr (F == Fmt::kBF16) {
    unpack_bf16x8(r.bits, out);
  } else if constexpr (F == Fmt::kFP8 || F == Fmt::kMXFP8) {
    unpack_e4m3x8(make_uint2(r.bits.x, r.bits.y), out);
    if constexpr (F == Fmt::kMXFP8) {
      const float s = formats::ue8m0_to_float(r.sf);
      for (int i = 0; i < 8; ++i) out[i] = formats::mul_rn(out[i], s);
    }
  } else {
    // NOTE: spec §4.1: element 2i in the low nibble, so nibble i of the little-endian word is
    // element i.
    const float sf = formats::e4m3_to_float(r.sf);
    for (int i = 0; i < 8; ++i) {
      out[i] = formats::mul_rn(
          formats::e2m1_to_float(static_cast<uint8_t>(r.bits.x >> (4 * i))), sf);
    }
  }
}

/// One expert of a physical weight view: [rows, K] in `F`'s storage.
struct WeightOperand {
  const uint8_t* data;   ///< expert base
  const uint8_t* scale;  ///< expert base of the 128x4 scales (nvfp4*, mxfp8)
  int64_t rows;
  int64_t cols;
};

template <Fmt F>
__device__ __forceinline__ WeightOperand weight_of_expert(const void* data, const uint8_t* scale,
                                                          int64_t expert, int64_t rows,
                                                          int64_t cols) {
  WeightOperand w;
  const int64_t elems = rows * cols;
  const int64_t bytes = F == Fmt::kBF16 ? 2 * elems : F == Fmt::kNVFP4 ? elems / 2 : elems;
  w.data = static_cast<const uint8_t*>(data) + expert * bytes;
  const int64_t vec = F == Fmt::kNVFP4 ? 16 : 32;
  w.scale = (F == Fmt::kNVFP4 || F == Fmt::kMXFP8)
                ? scale + expert * formats::sf_size_128x4(rows, cols / vec)
                : nullptr;
  w.rows = rows;
  w.cols = cols;
  return w;
}

/// Elements [k0, k0 + 8) of physical row `row` of a weight operand, raw. bf16 weights are
/// BlockMajorK [K/64, rows, 64] (spec §4.4 (d)); the others row-major with 128x4 scales (§4.4 (c)).
template <Fmt F>
__device__ __forceinline__ Raw8 fetch_weight8(const WeightOperand& w, int64_t row, int64_t k0) {
  if constexpr (F == Fmt::kBF16) {
    Raw8 r{};
    const auto* base = reinterpret_cast<const uint16_t*>(w.data);
    r.bits = __ldg(reinterpret_cast<const uint4*>(
        base + formats::block_major_k_offset(row, k0, w.rows)));
    return r;
  } else {
    const RowOperand op{w.data, w.scale, SfLayout::kR128C4, w.cols};
    return fetch_row8<F>(op, row, k0);
  }
}

}  // namespace gemm_kernels
}  // namespace stepfun
}  // namespace cakemoe
