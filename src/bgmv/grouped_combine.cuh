// Grouped combine (spec bgmv §5): the routing weight applied per route in ascending pair order
// over the unweighted partials (the reference::bgmv grouped order, docs/decisions/bgmv.md).
#pragma once

#include <cstdint>

#include "bgmv/grouped_index.cuh"
#include "ptx/cache_hints.cuh"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// grid T x 256: one token per CTA, all its columns (4 per thread per step, float4 loads of the
/// partials): y[t, c] = fma chain of partial * weight over the token's routes in ascending pair
/// order from 0 (reference::bgmv's grouped order); 0 for tokens without routes or LoRA.
///
/// The token's route list is read before griddepcontrol.wait: the index wrote it, and the index
/// grid completed before the shrink's wait returned, which precedes this grid's launch (the
/// expand triggers only after its own wait). The reads go to L2 (ld.global.cg), where the
/// index's stores are. Only the partials need this grid's wait.
template <int kUnused = 0>
__global__ void __launch_bounds__(kGroupCombineThreads) group_combine_kernel(GroupedParams p) {
  __shared__ int list[kGroupCombineThreads];
  __shared__ float weight[kGroupCombineThreads];
  __shared__ int warp_counts[kGroupCombineThreads / 32];
  const GroupedWs w = grouped_ws(p);
  const int t = blockIdx.x, tid = threadIdx.x;
  const int64_t h = p.hidden;
  const int count = __ldcg(w.token_count + t);
  float* y = p.y + static_cast<int64_t>(t) * p.y_row_stride;
  constexpr int kStep = 4 * kGroupCombineThreads;
  // NOTE: kSteps float4 per thread per chunk, every route's loads issued before the first store
  // (a store between them would keep the compiler from hoisting the next step's loads).
  constexpr int kSteps = 4;
  const auto accumulate = [&](int n, int c, float* acc) {
    for (int j = 0; j < n; ++j) {
      const float4 v = *reinterpret_cast<const float4*>(p.partials + list[j] * h + c);
      const float wj = weight[j];
      acc[0] = fmaf(v.x, wj, acc[0]);
      acc[1] = fmaf(v.y, wj, acc[1]);
      acc[2] = fmaf(v.z, wj, acc[2]);
      acc[3] = fmaf(v.w, wj, acc[3]);
    }
  };
  const auto store = [&](int c, const float* acc) {
    *reinterpret_cast<float4*>(y + c) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  };
  if (count <= kGroupTokenSlots) {
    // Sort the (unordered) slots ascending: each slot's rank = number of smaller pair ids.
    if (tid < count) {
      const int* slots = w.token_slots + t * kGroupTokenSlots;
      const int mine = __ldcg(slots + tid);
      int rank = 0;
      for (int j = 0; j < count; ++j) rank += __ldcg(slots + j) < mine;
      list[rank] = mine;
      weight[rank] = p.topk_weights[mine];
    }
    __syncthreads();
    ptx::griddep_wait();
    // The partials are dead after this read: evict-first, and with discard_partials each line
    // is dropped from L2 once the warp has read it (no write-back to HBM).
    const uint64_t read_policy = read_once_policy();
    for (int c0 = 4 * tid; c0 < h; c0 += kSteps * kStep) {
      float acc[kSteps][4] = {};
#pragma unroll 4
      for (int j = 0; j < count; ++j) {
        const float* src = p.partials + list[j] * h;
        const float wj = weight[j];
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
          const int c = c0 + s * kStep;
          if (c < h) {
            const float4 v = ptx::ld_global_l2_hint_v4_f32(reinterpret_cast<const float4*>(src + c),
                                                           read_policy);
            acc[s][0] = fmaf(v.x, wj, acc[s][0]);
            acc[s][1] = fmaf(v.y, wj, acc[s][1]);
            acc[s][2] = fmaf(v.z, wj, acc[s][2]);
            acc[s][3] = fmaf(v.w, wj, acc[s][3]);
          }
        }
      }
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        if (c0 + s * kStep < h) store(c0 + s * kStep, acc[s]);
      }
      if (p.discard_partials) {
        // NOTE: after the stores, which need every load of this thread; the warp's loads of a
        // line are one instruction, so its other lanes have their values too. Lane 8m owns the
        // line of columns c .. c + 31 (c % 32 == 0; rows start on a line since H % 32 == 0).
        __syncwarp();
        if (tid % 8 == 0) {
          for (int j = 0; j < count; ++j) {
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
              const int c = c0 + s * kStep;
              if (c < h) ptx::discard_global_l2_128(p.partials + list[j] * h + c);
            }
          }
        }
      }
    }
    return;
  }
  ptx::griddep_wait();
  // More than 16 routes: exact scan of all pairs, compacted in ascending order per chunk of 256,
  // once per column step.
  const int lane = tid & 31, warp = tid >> 5;
  for (int c0 = 0; c0 < h; c0 += kStep) {
    const int c = c0 + 4 * tid;
    float acc[4] = {};
    for (int base = 0; base < p.num_pairs; base += kGroupCombineThreads) {
      const int i = base + tid;
      const bool mine = i < p.num_pairs && p.sorted_token_ids[i] == t &&
                        route_bin(p.sorted_token_ids, p.expert_ids, p.lora_indices, i, p.num_tokens,
                                  p.num_loras, p.num_experts) >= 0;
      const unsigned ballot = __ballot_sync(0xFFFFFFFFu, mine);
      if (lane == 0) warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int offset = 0, chunk_count = 0;
      for (int wi = 0; wi < kGroupCombineThreads / 32; ++wi) {
        if (wi < warp) offset += warp_counts[wi];
        chunk_count += warp_counts[wi];
      }
      if (mine) {
        const int at = offset + __popc(ballot & ((1u << lane) - 1u));
        list[at] = i;
        weight[at] = p.topk_weights[i];
      }
      __syncthreads();
      if (c < h) accumulate(chunk_count, c, acc);
      __syncthreads();
    }
    if (c < h) store(c, acc);
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
