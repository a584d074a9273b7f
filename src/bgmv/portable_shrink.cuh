// Portable fallback shrink (spec §9, cakemoe deviation 3): runtime H (any positive value), any
// rank R <= 128, S slices. Grid (P, ceil(R / 8), S) x 128 threads; the canonical FP32 order of
// §3.2 with one split, so its rows equal reference::bgmv::shrink bit for bit. Elements past H read
// as zero (bitwise equal to skipping them, docs/decisions/bgmv.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kPortableThreads = 128;
constexpr int kPortableRankTile = 8;
constexpr int64_t kPortableTile = kPortableThreads * 8;

/// Elements k..k+7 of a row of `n` (zero past the end); one 16-byte load when `vec`.
template <bool kFp16>
CAKEMOE_DEVICE void load8_tail(const uint16_t* row, int64_t k, int64_t n, bool vec, float* out) {
  if (vec && k + 8 <= n) {
    unpack8<kFp16>(*reinterpret_cast<const uint4*>(row + k), out);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = k + i < n ? widen<kFp16>(row[k + i]) : 0.0f;
}

template <bool kFp16>
__global__ void __launch_bounds__(kPortableThreads) portable_shrink_kernel(const PortableParams p,
                                                                           bool vec) {
  __shared__ float warp_sums[kPortableThreads / kWarp][kPortableRankTile];
  const int tid = threadIdx.x;
  const int64_t pair = blockIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kPortableRankTile;
  const int s = blockIdx.z;
  const int64_t t = p.sorted_token_ids[pair];
  const int64_t l = (t >= 0 && t < p.T) ? p.lora_indices[t] : -1;
  uint16_t* out = static_cast<uint16_t*>(p.shrink_out) + (s * p.P + pair) * p.R;
  if (l < 0) return;  // the row stays as zeroed by launch_portable
  const int64_t e = p.expert_ids[pair];
  const uint16_t* x_row = static_cast<const uint16_t*>(p.x) + t * p.H;
  const uint16_t* a_rows = static_cast<const uint16_t*>(p.lora_a[s]) + ((l * p.E + e) * p.R) * p.H;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kPortableRankTile), p.R - r0));
  float acc[kPortableRankTile];
#pragma unroll
  for (int i = 0; i < kPortableRankTile; ++i) acc[i] = 0.0f;
  for (int64_t k = 8 * tid; k < p.H; k += kPortableTile) {
    float xf[8];
    load8_tail<kFp16>(x_row, k, p.H, vec, xf);
#pragma unroll
    for (int i = 0; i < kPortableRankTile; ++i) {
      if (i >= rows) break;
      float af[8];
      load8_tail<kFp16>(a_rows + (r0 + i) * p.H, k, p.H, vec, af);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i] = fmaf(xf[j], af[j], acc[i]);
    }
  }
  const int warp = tid / kWarp;
#pragma unroll
  for (int i = 0; i < kPortableRankTile; ++i) {
    const float v = warp_butterfly(acc[i]);
    if (tid % kWarp == 0) warp_sums[warp][i] = v;
  }
  __syncthreads();
  if (tid < rows) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kPortableThreads / kWarp; ++w) sum = sum + warp_sums[w][tid];
    out[r0 + tid] = narrow<kFp16>(0.0f + sum);
  }
}

/// Kernel-unit launcher (dtype dispatch).
inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

inline void launch_portable_shrink_unit(const PortableParams& p, void* stream) {
  if (p.P <= 0 || p.R <= 0 || p.S <= 0) return;
  // 16-byte loads only when every row start is 16-byte aligned.
  bool vec = p.H % 8 == 0 && aligned16(p.x);
  for (int s = 0; s < p.S; ++s) vec = vec && aligned16(p.lora_a[s]);
  const dim3 grid(static_cast<unsigned>(p.P),
                  static_cast<unsigned>((p.R + kPortableRankTile - 1) / kPortableRankTile),
                  static_cast<unsigned>(p.S));
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == 1) {
    portable_shrink_kernel<true><<<grid, kPortableThreads, 0, s>>>(p, vec);
  } else {
    portable_shrink_kernel<false><<<grid, kPortableThreads, 0, s>>>(p, vec);
  }
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
