// Host launcher of the grouped pipeline (spec bgmv §5): six plain launches in stream order, no
// allocation, no host synchronisation (graph-capturable). Instantiated per dtype by
// inst/bgmv_grouped_{bf16,fp16}.cu.
#pragma once

#include <cuda_runtime.h>

#include "bgmv/grouped_compute.cuh"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace grouped {

template <bool kBf16, int kRank>
void launch_grouped_expand(const GroupedParams& p, cudaStream_t stream) {
  const dim3 grid(p.max_tiles, (p.hidden + kGroupExpandCols - 1) / kGroupExpandCols);
  grouped_expand_kernel<kBf16, kRank><<<grid, kGroupExpandCols, 0, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

template <bool kBf16>
void launch_grouped(const GroupedParams& p, void* stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const size_t bins_bytes = static_cast<size_t>(p.num_loras) * p.num_experts * sizeof(int);
  group_hist_kernel<<<p.hist_ctas, kGroupHistThreads, bins_bytes, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  group_scan_kernel<<<1, 1024, 0, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  group_scatter_kernel<<<p.hist_ctas, kGroupHistThreads, bins_bytes, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  const dim3 shrink_grid(p.max_tiles, p.rank / kRankTile, kGroupTileRoutes / kGroupShrinkPart);
  grouped_shrink_kernel<kBf16><<<shrink_grid, kShrinkThreads, 0, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  switch (p.rank) {
    case 8: launch_grouped_expand<kBf16, 8>(p, stream); break;
    case 16: launch_grouped_expand<kBf16, 16>(p, stream); break;
    case 32: launch_grouped_expand<kBf16, 32>(p, stream); break;
    case 64: launch_grouped_expand<kBf16, 64>(p, stream); break;
    default:
      throw InvalidArgument("rank", "the grouped pipeline takes rank 8, 16, 32 or 64, got " +
                                        std::to_string(p.rank));
  }
  const dim3 combine_grid(p.num_tokens, (p.hidden + kGroupExpandCols - 1) / kGroupExpandCols);
  group_combine_kernel<<<combine_grid, kGroupExpandCols, 0, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
