// Host launcher of the grouped pipeline (spec bgmv §5): index (one CTA, or hist -> scan ->
// scatter), grouped shrink, then the slab expand or grouped expand -> combine. Every stage after
// the first is a programmatic dependent of the one before when p.pdl (each kernel waits with
// griddepcontrol.wait before it reads what the previous stage wrote). No allocation, no host
// synchronisation (graph-capturable). Instantiated per dtype by inst/bgmv_grouped_{bf16,fp16}.cu.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "bgmv/grouped_compute.cuh"
#include "cakemoe/errors.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// One stage: opts the kernel in to `smem` bytes of dynamic shared memory
/// (cudaFuncSetAttribute is not a stream operation: legal inside a capture), then launches it,
/// as a programmatic dependent of the previous stage when `dependent`.
inline void launch_stage(void (*kernel)(GroupedParams), dim3 grid, int threads, size_t smem,
                         bool dependent, cudaStream_t stream, const GroupedParams& p) {
  if (grid.x == 0 || grid.y == 0) return;
  if (smem > 0) {  // NOTE: static + dynamic > 48 KB needs the opt-in too
    CAKEMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependent ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, p);
  if (status != cudaSuccess) (void)cudaGetLastError();  // do not leave it for the next check
  CAKEMOE_CUDA_CHECK(status);
}

template <bool kBf16, int kRank>
void launch_grouped_expand(const GroupedParams& p, cudaStream_t stream) {
  const bool pdl = p.pdl != 0;
  if (p.slab_cols > 0) {
    const dim3 grid((p.hidden + p.slab_cols - 1) / p.slab_cols);
    const size_t smem = static_cast<size_t>(p.num_pairs) * p.slab_cols * sizeof(float);
    switch (p.slab_cols) {
      case 4: launch_stage(grouped_slab_kernel<kBf16, kRank, 4>, grid, kGroupSlabThreads, smem, pdl, stream, p); return;
      case 8: launch_stage(grouped_slab_kernel<kBf16, kRank, 8>, grid, kGroupSlabThreads, smem, pdl, stream, p); return;
      case 16: launch_stage(grouped_slab_kernel<kBf16, kRank, 16>, grid, kGroupSlabThreads, smem, pdl, stream, p); return;
      default:
        throw InvalidArgument("slab_cols", "the slab expand takes 4, 8 or 16 columns, got " +
                                               std::to_string(p.slab_cols));
    }
  }
  const dim3 grid(p.max_tiles, (p.hidden + kGroupExpandCols - 1) / kGroupExpandCols);
  launch_stage(grouped_expand_kernel<kBf16, kRank>, grid, kGroupExpandCols, 0, pdl, stream, p);
  const dim3 combine_grid(p.num_tokens, (p.hidden + kGroupExpandCols - 1) / kGroupExpandCols);
  launch_stage(group_combine_kernel<0>, combine_grid, kGroupExpandCols, 0, pdl, stream, p);
}

template <bool kBf16>
void launch_grouped(const GroupedParams& p, void* stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const bool pdl = p.pdl != 0;
  const int bins = p.num_loras * p.num_experts;
  if (p.slab_cols > 0 && !p.fused_index) {
    throw InvalidArgument("slab_cols", "the slab expand needs the one-CTA index");
  }
  if (p.fused_index) {
    if (p.num_pairs > kGroupFusedIndexMaxPairs) {
      throw InvalidArgument("fused_index", "the one-CTA index takes at most 16384 pairs");
    }
    const size_t smem = static_cast<size_t>(index_smem_ints(bins, p.num_pairs)) * sizeof(int);
    launch_stage(group_index_kernel<0>, dim3(1), kGroupIndexThreads, smem, false, stream, p);
  } else {
    const size_t bins_bytes = static_cast<size_t>(bins) * sizeof(int);
    launch_stage(group_hist_kernel<0>, dim3(p.hist_ctas), kGroupHistThreads, bins_bytes, false,
                 stream, p);
    launch_stage(group_scan_kernel<0>, dim3(1), 1024, 0, pdl, stream, p);
    launch_stage(group_scatter_kernel<0>, dim3(p.hist_ctas), kGroupHistThreads, bins_bytes, pdl,
                 stream, p);
  }
  const dim3 shrink_grid(p.max_tiles, p.rank / kRankTile);
  if (p.stage_a) {
    const size_t smem = static_cast<size_t>(kRankTile) * p.hidden * sizeof(uint16_t);
    launch_stage(grouped_shrink_kernel<kBf16, true>, shrink_grid, kShrinkThreads, smem, pdl,
                 stream, p);
  } else {
    launch_stage(grouped_shrink_kernel<kBf16, false>, shrink_grid, kShrinkThreads, 0, pdl, stream,
                 p);
  }
  switch (p.rank) {
    case 8: launch_grouped_expand<kBf16, 8>(p, stream); break;
    case 16: launch_grouped_expand<kBf16, 16>(p, stream); break;
    case 32: launch_grouped_expand<kBf16, 32>(p, stream); break;
    case 64: launch_grouped_expand<kBf16, 64>(p, stream); break;
    default:
      throw InvalidArgument("rank", "the grouped pipeline takes rank 8, 16, 32 or 64, got " +
                                        std::to_string(p.rank));
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
