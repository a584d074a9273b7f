// StepFun per-token NVFP4 requant (spec stepfun §6, nvfp4_bf16tok), bitwise equal to
// reference::stepfun::requant_nvfp4_per_token: one warp per expanded index, through
// expanded_idx_to_permuted_idx (-1 skipped); rows never reached are left untouched.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/launch_pdl.h"
#include "core/macros.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "formats/quantize.h"
#include "ptx/sync.cuh"
#include "stepfun/routing_params.h"

namespace cakemoe {
namespace stepfun {
namespace requant_kernels {

constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kWarpSize = 32;
constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;
constexpr int kBlock = formats::kNvfp4Block;

/// 8 bf16 values (one 16-byte word) to fp32.
CAKEMOE_DEVICE void unpack8(const uint4& word, float* out) {
  const uint32_t w[4] = {word.x, word.y, word.z, word.w};
  for (int q = 0; q < 4; ++q) {
    out[2 * q] = formats::bf16_to_float(static_cast<uint16_t>(w[q] & 0xFFFFu));
    out[2 * q + 1] = formats::bf16_to_float(static_cast<uint16_t>(w[q] >> 16));
  }
}

/// The 16 values of block c of a row; kVec: two 16-byte loads (row 16-byte aligned).
template <bool kVec>
CAKEMOE_DEVICE void load_block(const uint16_t* row, int64_t c, float* x) {
  if (kVec) {
    const uint4* words = reinterpret_cast<const uint4*>(row + c * kBlock);
    unpack8(words[0], x);
    unpack8(words[1], x + 8);
  } else {
    for (int j = 0; j < kBlock; ++j) x[j] = formats::bf16_to_float(row[c * kBlock + j]);
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) requant_nvfp4_kernel(const RequantParams p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (i >= p.num_expanded) return;  // whole warps
  const int32_t r = p.expanded_idx_to_permuted_idx[i];
  // NOTE: -1 is "not routed here"; any other out-of-range slot (which the CPU reference rejects)
  // is skipped as well, since a kernel has no error path.
  if (r < 0 || r >= p.rows) return;
  const uint16_t* row = p.input + static_cast<int64_t>(r) * p.cols;
  const int64_t num_blocks = p.cols / kBlock;

  // rowAmax: max over NaN-ignored |x| is order-free, so lanes may split the row.
  float amax = 0.0f;
  float x[kBlock];
  for (int64_t c = lane; c < num_blocks; c += kWarpSize) {
    load_block<kVec>(row, c, x);
    for (int j = 0; j < kBlock; ++j) amax = formats::max_ignore_nan(amax, formats::abs_bits(x[j]));
  }
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    amax = formats::max_ignore_nan(amax, __shfl_xor_sync(kFullMask, amax, offset));
  }
  const float scale = formats::mul_rn(amax, p.global_scale_inv);  // per-token decode scale
  const float encode = formats::rcp_rn(scale);

  uint8_t* packed_row = p.output + static_cast<int64_t>(r) * (p.cols / 2);
  for (int64_t c = lane; c < num_blocks; c += kWarpSize) {
    uint8_t packed[kBlock / 2] = {};
    uint8_t sf = 0;
    // NOTE: spec §6 zero guard (docs/decisions/routing.md): scale == 0 -> zero codes and SFs.
    if (scale != 0.0f) {
      load_block<kVec>(row, c, x);
      formats::nvfp4_quantize_block16(x, encode, packed, &sf);
    }
    uint8_t* dst = packed_row + c * (kBlock / 2);
    if (kVec) {
      uint2 word;
      word.x = packed[0] | (packed[1] << 8) | (packed[2] << 16) | (uint32_t(packed[3]) << 24);
      word.y = packed[4] | (packed[5] << 8) | (packed[6] << 16) | (uint32_t(packed[7]) << 24);
      *reinterpret_cast<uint2*>(dst) = word;
    } else {
      for (int j = 0; j < kBlock / 2; ++j) dst[j] = packed[j];
    }
    p.output_scale[formats::sf_offset(p.sf_layout, r, c, num_blocks)] = sf;
  }
  if (lane == 0) p.per_token_scale[r] = scale;
}

/// Enqueues the requant of `p` on `stream`; 16-byte loads / 8-byte stores when aligned.
inline void launch(const RequantParams& p, Stream stream) {
  if (p.num_expanded == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool vec = reinterpret_cast<uintptr_t>(p.input) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.output) % 8 == 0;
  const int64_t blocks = (p.num_expanded + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (vec) {
    core::launch_dependent(requant_nvfp4_kernel<true>, static_cast<unsigned>(blocks),
                           dim3(kThreads), 0, s, p);
  } else {
    core::launch_dependent(requant_nvfp4_kernel<false>, static_cast<unsigned>(blocks),
                           dim3(kThreads), 0, s, p);
  }
}

}  // namespace requant_kernels
}  // namespace stepfun
}  // namespace cakemoe
