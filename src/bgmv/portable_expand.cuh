// Portable fallback expand (spec §9): pair-owned, grid (P, ceil(F / 128), S) x 128 threads, one
// thread per output column, a programmatic dependent of the shrink when p.pdl. Per route it
// builds the §3.2 rank-group partials (groups of 8 ranks, the last one short), weights each one
// (fmaf(part, w, 0)), folds them with the butterfly over the next power of two lanes and adds the
// result to y with an FP32 atomic.
// NOTE: the atomics make y independent of pair order only up to rounding: a token with one route
// matches the reference bit for bit, two routes are order-independent (IEEE addition commutes),
// three or more may differ in the last bits between replays (spec §9).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "core/cuda_check.h"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kPortableCols = 128;
constexpr int kPortableMaxGroups = static_cast<int>(kPortableMaxRank / 8);
static_assert(kPortableMaxGroups == 16, "the expand instances cover 1, 2, 4, 8 and 16 groups");

/// The lane fold from offset kOff down to 1: v[i] += v[i + off] for i < off.
template <int kOff>
CAKEMOE_DEVICE void fold_levels(float* v) {
  if constexpr (kOff >= 1) {
#pragma unroll
    for (int i = 0; i < kOff; ++i) v[i] = v[i] + v[i + kOff];
    fold_levels<kOff / 2>(v);
  }
}

/// Part of rank group g of one route (canonical: FMA over the group's ranks, then weighted).
template <bool kFp16>
CAKEMOE_DEVICE float group_part(const float* s_row, const uint4& b_vec, const uint16_t* b_row,
                                int g, int64_t rank, bool vec, float w) {
  float part = 0.0f;
  if (vec) {  // R % 8 == 0 and 16-byte aligned rows: one vector per group
    float bf[8];
    unpack8<kFp16>(b_vec, bf);
#pragma unroll
    for (int i = 0; i < 8; ++i) part = fmaf(s_row[8 * g + i], bf[i], part);
  } else {
    const int64_t end = min(static_cast<int64_t>(8 * g + 8), rank);
    for (int64_t r = 8 * g; r < end; ++r) part = fmaf(s_row[r], widen<kFp16>(b_row[r]), part);
  }
  return fmaf(part, w, 0.0f);
}

/// Token, expert, weight and the shrink row are read in one trip, the LoRA in a second, B's
/// row in a third, all before griddepcontrol.wait (none of them is written by the shrink); only
/// the shrink row's widening and the atomics wait for the shrink grid.
/// kGroups: a power of two >= ceil(R / 8) (the instance keeps that many B vectors in registers).
template <bool kFp16, int kGroups>
__global__ void __launch_bounds__(kPortableCols) portable_expand_kernel(const PortableParams p,
                                                                        bool vec) {
  __shared__ float s_row[kPortableMaxRank];
  const int64_t pair = blockIdx.x;
  const int s = blockIdx.z;
  const int64_t t = p.sorted_token_ids[pair];
  const int64_t e = p.expert_ids[pair];
  const float w = p.topk_weights[pair];
  if (t < 0 || t >= p.T) return;
  const int64_t l = p.lora_indices[t];
  if (l < 0) return;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kPortableCols + threadIdx.x;
  const bool live = col < p.F;
  const uint16_t* b_row =
      static_cast<const uint16_t*>(p.lora_b[s]) + ((l * p.E + e) * p.F + (live ? col : 0)) * p.R;
  const int groups = static_cast<int>((p.R + 7) / 8);
  uint4 b_vec[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    if (vec && live && g < groups) b_vec[g] = *reinterpret_cast<const uint4*>(b_row + 8 * g);
  }
  ptx::griddep_wait();  // the shrink rows (and y's zeros) are the shrink grid's
  const uint16_t* shrink = static_cast<const uint16_t*>(p.shrink_out) + (s * p.P + pair) * p.R;
  for (int64_t r = threadIdx.x; r < p.R; r += kPortableCols) s_row[r] = widen<kFp16>(shrink[r]);
  __syncthreads();
  if (!live) return;
  float v[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    v[g] = g < groups ? group_part<kFp16>(s_row, b_vec[g], b_row, g, p.R, vec, w) : 0.0f;
  }
  // The fold over the next power of two lanes L >= groups (offsets L / 2, ..., 1), written as
  // the fold over all kGroups: the levels above L only add the +0 of empty groups, which leaves
  // every value as it is but a -0 (made +0), and y, which starts at +0, cannot tell those apart.
  fold_levels<kGroups / 2>(v);
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
  // The smallest instance that holds the rank's groups: fewer registers, more CTAs per SM.
  const int64_t groups = (p.R + 7) / 8;
  const auto pick = [&](auto fp16) {
    constexpr bool kFp16 = decltype(fp16)::value;
    return groups <= 1   ? portable_expand_kernel<kFp16, 1>
           : groups <= 2 ? portable_expand_kernel<kFp16, 2>
           : groups <= 4 ? portable_expand_kernel<kFp16, 4>
           : groups <= 8 ? portable_expand_kernel<kFp16, 8>
                         : portable_expand_kernel<kFp16, 16>;
  };
  const auto kernel = p.dtype == 1 ? pick(std::true_type{}) : pick(std::false_type{});
  launch_pdl(kernel, grid, dim3(kPortableCols), 0, static_cast<cudaStream_t>(stream), p.pdl != 0,
             p, vec);
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
