// Device pieces of the StepFun permutation tables (spec stepfun §2.3-§2.5), bitwise equal to
// reference::stepfun::build_tables. The expert scratch (`histogram`, caller's
// expert_count_histogram) holds cnt[e] in [0, E_loc) and ctaOffset[e] in [E_loc, 2 E_loc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"
#include "stepfun/routing_params.h"
#include "stepfun/routing_topk.cuh"

namespace cakemoe {
namespace stepfun {
namespace routing_kernels {

/// reference::stepfun::kTailPoison.
constexpr int32_t kTailPoison = static_cast<int32_t>(0xDEADBEEFu);

/// Local expert of expanded index i, or -1 (spec §2.3: any id outside [off, off + E_loc),
/// including ids outside [0, E), is non-local). Logits mode reads the ids back from topk_packed.
/// NOTE: plain loads: topk_packed may have been written earlier in the same kernel.
CAKEMOE_DEVICE int local_expert(const RoutingParams& p, int64_t i) {
  const int32_t id = p.topk_ids != nullptr
                         ? p.topk_ids[i]
                         : static_cast<int32_t>(static_cast<uint32_t>(p.topk_packed[i]) >> 16);
  const int64_t e = static_cast<int64_t>(id) - p.local_expert_offset;
  return (e >= 0 && e < p.local_num_experts) ? static_cast<int>(e) : -1;
}

/// CTAs of an expert with `count` pairs: ceil(count / tile).
CAKEMOE_DEVICE int ctas_of(int count, int tile) {
  return static_cast<int>((static_cast<int64_t>(count) + tile - 1) / tile);
}

/// Bit mask of the lanes below `lane`.
CAKEMOE_DEVICE unsigned lanes_below(int lane) { return (1u << lane) - 1u; }

/// Exclusive prefix sum of one int per thread over the block (blockDim.x a multiple of 32);
/// every thread must call it. `*total` receives the block sum.
CAKEMOE_DEVICE int block_exclusive_scan(int value, int* total) {
  __shared__ int warp_sums[32];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  int inclusive = value;
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const int below = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += below;
  }
  if (lane == kWarpSize - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int s = lane < num_warps ? warp_sums[lane] : 0;
    for (int offset = 1; offset < kWarpSize; offset <<= 1) {
      const int below = __shfl_up_sync(kFullMask, s, offset);
      if (lane >= offset) s += below;
    }
    if (lane < num_warps) warp_sums[lane] = s;  // inclusive over warps
  }
  __syncthreads();
  const int result = (warp == 0 ? 0 : warp_sums[warp - 1]) + inclusive - value;
  *total = warp_sums[num_warps - 1];
  __syncthreads();  // warp_sums may be reused by the next call
  return result;
}

/// From cnt[e] (histogram[0, E_loc), visible to the block) writes ctaOffset[e], the optional
/// num_tokens_per_expert and the two scalars (spec §2.4). Block-wide; returns Σ numCta to all.
/// ctaOffset is written by the calling threads only: __syncthreads before reading it.
CAKEMOE_DEVICE int scan_experts(const RoutingParams& p) {
  const int num_local = p.local_num_experts;
  const int per_thread = (num_local + blockDim.x - 1) / blockDim.x;
  const int begin = min(num_local, static_cast<int>(threadIdx.x) * per_thread);
  const int end = min(num_local, begin + per_thread);
  int mine = 0;
  for (int e = begin; e < end; ++e) mine += ctas_of(p.histogram[e], p.tile);
  int num_ctas = 0;
  int offset = block_exclusive_scan(mine, &num_ctas);
  for (int e = begin; e < end; ++e) {
    const int count = p.histogram[e];
    p.histogram[num_local + e] = offset;
    offset += ctas_of(count, p.tile);
    if (p.num_tokens_per_expert != nullptr) p.num_tokens_per_expert[e] = count;
  }
  if (threadIdx.x == 0) {
    *p.num_non_exiting_ctas = num_ctas;
    *p.total_num_padded_tokens = num_ctas * p.tile;
  }
  return num_ctas;
}

/// The local expert owning CTA c < num_ctas: the last e with ctaOffset[e] <= c (experts without
/// CTAs share the offset of the next one and are skipped by "last").
CAKEMOE_DEVICE int cta_owner(const RoutingParams& p, int c) {
  const int32_t* cta_offset = p.histogram + p.local_num_experts;
  int lo = 0;  // invariant: cta_offset[lo] <= c (cta_offset[0] == 0)
  int hi = p.local_num_experts - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (cta_offset[mid] <= c) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/// Exclusive end of the valid rows of expert e: ctaOffset[e] * tile + cnt[e].
CAKEMOE_DEVICE int64_t valid_end(const RoutingParams& p, int e) {
  return static_cast<int64_t>(p.histogram[p.local_num_experts + e]) * p.tile + p.histogram[e];
}

/// CTA table entry c in [0, max_ctas): its expert and mn_limit, or the tail (spec §2.4 DECISION).
CAKEMOE_DEVICE void write_cta_entry(const RoutingParams& p, int c, int num_ctas) {
  if (c < num_ctas) {
    const int e = cta_owner(p, c);
    const int64_t full = static_cast<int64_t>(c + 1) * p.tile;
    const int64_t end = valid_end(p, e);
    p.cta_idx_xy_to_batch_idx[c] = e;
    p.cta_idx_xy_to_mn_limit[c] = static_cast<int32_t>(full < end ? full : end);
  } else {
    p.cta_idx_xy_to_batch_idx[c] = p.poison_tail ? kTailPoison : 0;
    p.cta_idx_xy_to_mn_limit[c] =
        p.poison_tail ? kTailPoison : static_cast<int32_t>(static_cast<int64_t>(c) * p.tile);
  }
}

/// permuted_idx_to_token_idx entry s in [0, p2t_end) when it is not a routed slot: -1 for the
/// padding inside a segment, the tail value past total_num_padded_tokens. Routed slots are left
/// to the scatter, so the two writers never touch the same entry.
CAKEMOE_DEVICE void fill_p2t_entry(const RoutingParams& p, int s, int total_padded) {
  if (s < total_padded) {
    if (s >= valid_end(p, cta_owner(p, s / p.tile))) p.permuted_idx_to_token_idx[s] = -1;
  } else {
    p.permuted_idx_to_token_idx[s] = p.poison_tail ? kTailPoison : -1;
  }
}

}  // namespace routing_kernels
}  // namespace stepfun
}  // namespace cakemoe
