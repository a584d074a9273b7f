// SM90 order-remap prologue (spec bgmv §6): one CTA of 1024 threads writes the permutation of
// the pairs stably sorted by (lora, expert) bin, invalid pairs (padding, LoRA -1) last. The
// per-route shrink maps its CTA index through it; every route still runs the same code on the
// same operands, so results are bitwise identical to identity dispatch.
#pragma once

#include <cuda_runtime.h>

#include "bgmv/grouped_common.cuh"
#include "bgmv/grouped_launch.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// dynamic smem: (bins + 1) ints.
template <int kUnused = 0>
__global__ void __launch_bounds__(kOrderBuildThreads) order_build_kernel(OrderBuildParams p) {
  extern __shared__ int cursor[];
  __shared__ int warp_sums[32];
  const int bins = p.num_loras * p.num_experts;
  const auto key_of = [&](int i) {
    const int b = route_bin(p.sorted_token_ids, p.expert_ids, p.lora_indices, i, p.num_tokens,
                            p.num_loras, p.num_experts);
    return b >= 0 ? b : bins;  // invalid pairs sort last
  };
  for (int b = threadIdx.x; b <= bins; b += blockDim.x) cursor[b] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < p.num_pairs; i += blockDim.x) atomicAdd(&cursor[key_of(i)], 1);
  __syncthreads();
  block_exclusive_scan(cursor, bins + 1, warp_sums);
  for (int round = 0; round < p.num_pairs; round += blockDim.x) {
    const int i = round + threadIdx.x;
    const int key = i < p.num_pairs ? key_of(i) : -1;
    const int pos = stable_place(key, cursor);
    if (key >= 0) p.order[pos] = i;
  }
}

inline void launch_order_build(const OrderBuildParams& p, void* stream) {
  const size_t smem = (static_cast<size_t>(p.num_loras) * p.num_experts + 1) * sizeof(int);
  order_build_kernel<<<1, kOrderBuildThreads, smem, static_cast<cudaStream_t>(stream)>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
