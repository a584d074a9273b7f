// Portable fallback shrink (spec §9, cakemoe deviation 3): runtime H (any positive value), any
// rank R <= 128, S slices. Grid (P, ceil(R / 8), S) x 128 threads; the canonical FP32 order of
// §3.2 with one split, so its rows equal reference::bgmv::shrink bit for bit. Elements past H read
// as zero (bitwise equal to skipping them, docs/decisions/bgmv.md). It also writes the rows of
// pairs without a LoRA (zeros) and zeroes y for the expand, so the plan needs no memset nodes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "core/cuda_check.h"
#include "ptx/sync.cuh"

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

/// Zeroes this CTA's share of y (all T * S * F floats, grid-strided over the shrink's CTAs): the
/// expand's atomics start from zero without a memset node of their own.
CAKEMOE_DEVICE void zero_y_share(const PortableParams& p) {
  const int64_t n = p.T * p.S * p.F;
  const int64_t cta = blockIdx.x + static_cast<int64_t>(gridDim.x) *
                                       (blockIdx.y + static_cast<int64_t>(gridDim.y) * blockIdx.z);
  const int64_t ctas = static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z;
  for (int64_t i = cta * kPortableThreads + threadIdx.x; i < n; i += ctas * kPortableThreads) {
    p.y[i] = 0.0f;
  }
}

/// k tiles whose loads one thread has in flight at once: H <= 4096 is a single trip. That takes
/// ~180 registers (2 CTAs per SM), which pays only while the grid is small; larger grids take one
/// tile per trip at higher occupancy (kPortableDeepMaxCtas).
constexpr int kPortablePrefetchTiles = 4;
constexpr int64_t kPortableDeepMaxCtas = 1024;

/// grid (P, ceil(R / 8), S) x 128. Token and expert are read in one trip, the LoRA in a second,
/// then x and A for kDepth k tiles in a third, all before the first FMA;
/// the FMA order is the canonical one (each thread's k tiles ascending).
template <bool kFp16, int kDepth>
__global__ void __launch_bounds__(kPortableThreads) portable_shrink_kernel(const PortableParams p,
                                                                           bool vec) {
  __shared__ float warp_sums[kPortableThreads / kWarp][kPortableRankTile];
  const int tid = threadIdx.x;
  const int64_t pair = blockIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kPortableRankTile;
  const int s = blockIdx.z;
  const int64_t t = p.sorted_token_ids[pair];
  const int64_t e = p.expert_ids[pair];
  const int64_t l = (t >= 0 && t < p.T) ? p.lora_indices[t] : -1;
  uint16_t* out = static_cast<uint16_t*>(p.shrink_out) + (s * p.P + pair) * p.R;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kPortableRankTile), p.R - r0));
  ptx::griddep_launch_dependents();  // the expand's index and B loads need nothing from this grid
  zero_y_share(p);
  if (l < 0) {
    if (tid < rows) out[r0 + tid] = 0;
    return;
  }
  const uint16_t* x_row = static_cast<const uint16_t*>(p.x) + t * p.H;
  const uint16_t* a_rows =
      static_cast<const uint16_t*>(p.lora_a[s]) + ((l * p.E + e) * p.R + r0) * p.H;
  float acc[kPortableRankTile];
#pragma unroll
  for (int i = 0; i < kPortableRankTile; ++i) acc[i] = 0.0f;
  if (vec) {
    constexpr int64_t kStep = kDepth * kPortableTile;
    for (int64_t k0 = 8 * tid; k0 < p.H; k0 += kStep) {
      uint4 xv[kDepth], av[kDepth][kPortableRankTile];
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        const int64_t k = k0 + d * kPortableTile;
        if (k >= p.H) continue;
        xv[d] = *reinterpret_cast<const uint4*>(x_row + k);
#pragma unroll
        for (int i = 0; i < kPortableRankTile; ++i) {
          if (i < rows) av[d][i] = *reinterpret_cast<const uint4*>(a_rows + i * p.H + k);
        }
      }
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        if (k0 + d * kPortableTile >= p.H) continue;
        float xf[8];
        unpack8<kFp16>(xv[d], xf);
#pragma unroll
        for (int i = 0; i < kPortableRankTile; ++i) {
          if (i >= rows) continue;
          float af[8];
          unpack8<kFp16>(av[d][i], af);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i] = fmaf(xf[j], af[j], acc[i]);
        }
      }
    }
  } else {
    for (int64_t k = 8 * tid; k < p.H; k += kPortableTile) {
      float xf[8];
      load8_tail<kFp16>(x_row, k, p.H, false, xf);
#pragma unroll
      for (int i = 0; i < kPortableRankTile; ++i) {
        if (i >= rows) break;
        float af[8];
        load8_tail<kFp16>(a_rows + i * p.H, k, p.H, false, af);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i] = fmaf(xf[j], af[j], acc[i]);
      }
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
  const bool deep = static_cast<int64_t>(grid.x) * grid.y * grid.z <= kPortableDeepMaxCtas;
  const auto kernel =
      p.dtype == 1 ? (deep ? portable_shrink_kernel<true, kPortablePrefetchTiles>
                           : portable_shrink_kernel<true, 1>)
                   : (deep ? portable_shrink_kernel<false, kPortablePrefetchTiles>
                           : portable_shrink_kernel<false, 1>);
  kernel<<<grid, kPortableThreads, 0, s>>>(p, vec);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
