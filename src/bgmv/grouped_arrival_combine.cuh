// The combine inside the tensor-core grouped expand (GroupedParams::combine_in_expand): the last
// CTA to store a token's partials for a 256-column block writes that token's y for the block.
// Same arithmetic and order as group_combine_kernel (an fma chain of partial * weight over the
// token's routes in ascending pair order from 0), so the bits do not depend on who combines; the
// arrival counters are the only atomics (spec §3.2 allows them on counters, never on y), the
// partials are read from L2 soon after they were written instead of in a pass of their own.
#pragma once

#include <cstdint>

#include "bgmv/grouped_index.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// Called by every thread of a 128-thread CTA of tile `info` after its last partial store, for the
/// columns [col0, col0 + 256). Tokens with more than 16 routes are left to the combine kernel.
CAKEMOE_DEVICE void combine_arrived_tokens(const GroupedParams& p, const GroupedWs& w,
                                           const int4& info, int64_t col0) {
  __shared__ int s_last;
  __shared__ int s_token[kGroupTileRoutes];
  __shared__ int s_routes[kGroupTileRoutes];
  __shared__ int s_pair[kGroupTileRoutes][kGroupTokenSlots];
  __shared__ float s_weight[kGroupTileRoutes][kGroupTokenSlots];
  const int tid = static_cast<int>(threadIdx.x);
  // Release: this thread's partials are visible device-wide before any arrival counts them.
  __threadfence();
  __syncthreads();
  if (tid < 32) {
    bool last = false;
    int token = 0, routes = 0;
    if (tid < info.y) {
      token = static_cast<int>(route_token(p, __ldcg(w.sorted_routes + info.x + tid)));
      routes = __ldcg(w.token_count + token);
      if (routes <= kGroupTokenSlots) {
        int* counter = w.arrivals + static_cast<int64_t>(token) * gridDim.y + blockIdx.y;
        last = atomicAdd(counter, 1) == routes - 1;
        // NOTE: every other route of the token has arrived, so no one touches the counter again
        // in this run: the reset leaves it 0 for the next one.
        if (last) *counter = 0;
      }
    }
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, last);
    if (last) {
      const int at = __popc(ballot & ((1u << tid) - 1u));
      s_token[at] = token;
      s_routes[at] = routes;
    }
    if (tid == 0) s_last = __popc(ballot);
    // Acquire: the other CTAs' partials, released before their arrivals, are read after ours.
    __threadfence();
  }
  __syncthreads();
  const int last_tokens = s_last;
  if (last_tokens == 0) return;  // CTA-uniform
  // Each combined token's routes in ascending pair order (a slot's rank = smaller pair ids).
  for (int i = tid; i < last_tokens * kGroupTokenSlots; i += blockDim.x) {
    const int j = i / kGroupTokenSlots, slot = i % kGroupTokenSlots;
    if (slot < s_routes[j]) {
      const int* slots = w.token_slots + static_cast<int64_t>(s_token[j]) * kGroupTokenSlots;
      const int mine = __ldcg(slots + slot);
      int rank = 0;
      for (int q = 0; q < s_routes[j]; ++q) rank += __ldcg(slots + q) < mine;
      s_pair[j][rank] = mine;
      s_weight[j][rank] = p.topk_weights[mine];
    }
  }
  __syncthreads();
  static_assert(kGroupArrivalCols == 2 * 128, "two columns per thread of a 128-thread CTA");
  const int64_t hidden = p.hidden;
  const int64_t c = col0 + 2 * tid;
  const bool live = c < hidden;  // H % 8 == 0: a 16-lane line group is wholly in or out
  for (int j = 0; j < last_tokens; ++j) {
    const int routes = s_routes[j];
    if (live) {
      float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll 4
      for (int q = 0; q < routes; ++q) {
        const float2 v =
            __ldcg(reinterpret_cast<const float2*>(p.partials + s_pair[j][q] * hidden + c));
        const float wq = s_weight[j][q];
        acc0 = fmaf(v.x, wq, acc0);
        acc1 = fmaf(v.y, wq, acc1);
      }
      *reinterpret_cast<float2*>(p.y + static_cast<int64_t>(s_token[j]) * p.y_row_stride + c) =
          make_float2(acc0, acc1);
    }
    if (p.discard_partials) {
      // NOTE: the partials are dead once read (this CTA is their only reader); lane 16 m owns
      // the 128-byte line of columns c .. c + 31 (c % 32 == 0 here, rows start on a line since
      // H % 32 == 0), dropped after the warp's loads so it is never written back to HBM.
      __syncwarp();
      if (live && tid % 16 == 0) {
        for (int q = 0; q < routes; ++q) {
          dev::discard_l2_line(p.partials + s_pair[j][q] * hidden + c);
        }
      }
    }
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
