// Portable fallback expand (spec §9): pair-owned, grid (P, ceil(F / 128), S) x 128 threads, one
// thread per output column. Per route it builds the §3.2 rank-group partials (groups of 8 ranks,
// the last one short), weights each one (fmaf(part, w, 0)), folds them with the butterfly over
// the next power of two lanes and adds the result to y with an FP32 atomic.
// NOTE: the atomics make y independent of pair order only up to rounding: a token with one route
// matches the reference bit for bit, two routes are order-independent (IEEE addition commutes),
// three or more may differ in the last bits between replays (spec §9).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kPortableCols = 128;
constexpr int kPortableMaxGroups = static_cast<int>(kPortableMaxRank / 8);

template <bool kFp16>
__global__ void __launch_bounds__(kPortableCols) portable_expand_kernel(const PortableParams p,
                                                                        bool vec) {
  __shared__ float s_row[kPortableMaxRank];
  const int64_t pair = blockIdx.x;
  const int s = blockIdx.z;
  const int64_t t = p.sorted_token_ids[pair];
  if (t < 0 || t >= p.T) return;
  const int64_t l = p.lora_indices[t];
  if (l < 0) return;
  const uint16_t* shrink = static_cast<const uint16_t*>(p.shrink_out) + (s * p.P + pair) * p.R;
  for (int64_t r = threadIdx.x; r < p.R; r += kPortableCols) s_row[r] = widen<kFp16>(shrink[r]);
  __syncthreads();
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kPortableCols + threadIdx.x;
  if (col >= p.F) return;
  const float w = p.topk_weights[pair];
  const uint16_t* b_row = static_cast<const uint16_t*>(p.lora_b[s]) +
                          ((l * p.E + p.expert_ids[pair]) * p.F + col) * p.R;
  const int groups = static_cast<int>((p.R + 7) / 8);
  int lanes = 1;
  while (lanes < groups) lanes *= 2;
  float v[kPortableMaxGroups];
  for (int g = 0; g < lanes; ++g) {
    float part = 0.0f;
    if (g < groups && vec) {  // R % 8 == 0 and 16-byte aligned rows: one vector per group
      float bf[8];
      unpack8<kFp16>(*reinterpret_cast<const uint4*>(b_row + 8 * g), bf);
      for (int i = 0; i < 8; ++i) part = fmaf(s_row[8 * g + i], bf[i], part);
      part = fmaf(part, w, 0.0f);
    } else if (g < groups) {
      const int64_t end = min(static_cast<int64_t>(8 * g + 8), p.R);
      for (int64_t r = 8 * g; r < end; ++r) part = fmaf(s_row[r], widen<kFp16>(b_row[r]), part);
      part = fmaf(part, w, 0.0f);
    }
    v[g] = part;
  }
  for (int off = lanes / 2; off >= 1; off /= 2) {
    for (int i = 0; i < off; ++i) v[i] = v[i] + v[i + off];
  }
  atomicAdd(p.y + t * (p.S * p.F) + s * p.F + col, v[0]);
}

/// Kernel-unit launcher (dtype dispatch).
inline void launch_portable_expand_unit(const PortableParams& p, void* stream) {
  if (p.P <= 0 || p.F <= 0 || p.S <= 0) return;
  const dim3 grid(static_cast<unsigned>(p.P),
                  static_cast<unsigned>((p.F + kPortableCols - 1) / kPortableCols),
                  static_cast<unsigned>(p.S));
  bool vec = p.R % 8 == 0;
  for (int s = 0; s < p.S; ++s) {
    vec = vec && reinterpret_cast<uintptr_t>(p.lora_b[s]) % 16 == 0;
  }
  const auto stream_handle = static_cast<cudaStream_t>(stream);
  if (p.dtype == 1) {
    portable_expand_kernel<true><<<grid, kPortableCols, 0, stream_handle>>>(p, vec);
  } else {
    portable_expand_kernel<false><<<grid, kPortableCols, 0, stream_handle>>>(p, vec);
  }
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
