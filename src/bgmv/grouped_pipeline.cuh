// Host launchers of the grouped pipeline (spec bgmv §5): index (one CTA, or hist -> scan ->
// scatter), grouped shrink, grouped expand, combine, one function per stage and launch_grouped
// for all four. Every stage after the first is a programmatic dependent of the one before when
// p.pdl (each kernel waits with griddepcontrol.wait before it reads what the previous stage
// wrote). No allocation, no host synchronisation (graph-capturable). Instantiated per dtype by
// inst/bgmv_grouped_{bf16,fp16}.cu.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "bgmv/grouped_combine.cuh"
#include "bgmv/grouped_expand.cuh"
#include "bgmv/grouped_expand_mma.cuh"
#include "bgmv/grouped_shrink.cuh"
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
  dev::launch_pdl(kernel, grid, dim3(threads), smem, stream, dependent, p);
}

/// Stage 4, the combine: y rows from each token's weighted partials.
inline void launch_grouped_combine(const GroupedParams& p, cudaStream_t stream) {
  launch_stage(group_combine_kernel<0>, dim3(p.num_tokens), kGroupCombineThreads, 0, p.pdl != 0,
               stream, p);
}

/// Stage 3, the expand: tensor cores at ranks 32 / 64, SIMT at ranks 8 / 16
/// (grouped_tensor_core_expand()).
template <bool kBf16, int kRank>
void launch_grouped_expand_rank(const GroupedParams& p, cudaStream_t stream) {
  if constexpr (grouped_tensor_core_expand(kRank)) {
    const dim3 grid(static_cast<unsigned>(p.max_tiles),
                    static_cast<unsigned>((p.hidden + kMmaExpandCols - 1) / kMmaExpandCols));
    launch_stage(grouped_expand_mma_kernel<kBf16, kRank>, grid, kMmaExpandWarps * 32, 0, p.pdl != 0,
                 stream, p);
  } else {
    const dim3 grid((p.max_tiles + kGroupExpandTiles - 1) / kGroupExpandTiles,
                    (p.hidden + kGroupExpandCols - 1) / kGroupExpandCols);
    launch_stage(grouped_expand_kernel<kBf16, kRank>, grid, kGroupExpandThreads,
                 static_cast<size_t>(grouped_expand_smem_bytes(kRank, kGroupExpandTiles)),
                 p.pdl != 0, stream, p);
  }
}

/// Calls f(std::integral_constant<int, R>) for the grouped pipeline's rank R (8, 16, 32 or 64).
template <typename F>
void with_rank(int rank, F&& f) {
  switch (rank) {
    case 8:
      f(std::integral_constant<int, 8>{});
      return;
    case 16:
      f(std::integral_constant<int, 16>{});
      return;
    case 32:
      f(std::integral_constant<int, 32>{});
      return;
    case 64:
      f(std::integral_constant<int, 64>{});
      return;
    default:
      throw InvalidArgument(
          "rank", "the grouped pipeline takes rank 8, 16, 32 or 64, got " + std::to_string(rank));
  }
}

/// Stage 1, the index: one CTA, or hist -> scan -> scatter.
inline void launch_grouped_index(const GroupedParams& p, cudaStream_t stream) {
  const bool pdl = p.pdl != 0;
  const int bins = p.num_loras * p.num_experts;
  if (p.fused_index) {
    if (p.num_pairs > kGroupFusedIndexMaxPairs) {
      throw InvalidArgument("fused_index", "the one-CTA index takes at most 16384 pairs");
    }
    const size_t smem =
        static_cast<size_t>(index_smem_ints(bins, p.num_pairs, p.num_tokens)) * sizeof(int);
    const auto kernel = [&](int per) {
      switch (per) {
        case 2:
          return group_index_kernel<2>;
        case 4:
          return group_index_kernel<4>;
        case 8:
          return group_index_kernel<8>;
        default:
          return group_index_kernel<16>;
      }
    }(index_pairs_per_thread(p.num_pairs));
    launch_stage(kernel, dim3(1), kGroupIndexThreads, smem, false, stream, p);
  } else {
    const size_t bins_bytes = static_cast<size_t>(bins) * sizeof(int);
    launch_stage(group_hist_kernel<0>, dim3(p.hist_ctas), kGroupHistThreads, bins_bytes, false,
                 stream, p);
    launch_stage(group_scan_kernel<0>, dim3(1), 1024, 0, pdl, stream, p);
    launch_stage(group_scatter_kernel<0>, dim3(p.hist_ctas), kGroupHistThreads, bins_bytes, pdl,
                 stream, p);
  }
}

/// Stage 2, the shrink, in the plan's staging form (tile-major grid: a tile's rank blocks side
/// by side).
template <bool kBf16>
void launch_grouped_shrink(const GroupedParams& p, cudaStream_t stream) {
  const bool pdl = p.pdl != 0;
  const dim3 grid(static_cast<unsigned>(p.max_tiles * (p.rank / kRankTile)));
  const size_t row_bytes = static_cast<size_t>(grouped_stage_row_bytes(p.hidden));
  switch (p.stage) {
    case kGroupStageNone:
      launch_stage(grouped_shrink_kernel<kBf16, kGroupStageNone>, grid, kShrinkThreads, 0, pdl,
                   stream, p);
      break;
    case kGroupStageA:
      launch_stage(grouped_shrink_kernel<kBf16, kGroupStageA>, grid, kShrinkThreads,
                   kRankTile * row_bytes, pdl, stream, p);
      break;
    case kGroupStageAX:
      launch_stage(grouped_shrink_kernel<kBf16, kGroupStageAX>, grid, kShrinkThreads,
                   (kRankTile + kGroupShrinkPart) * row_bytes, pdl, stream, p);
      break;
    default:
      throw InvalidArgument("stage",
                            "the grouped shrink stages 0, 1 or 2, got " + std::to_string(p.stage));
  }
}

/// Stage 3 at the plan's rank.
template <bool kBf16>
void launch_grouped_expand(const GroupedParams& p, cudaStream_t stream) {
  with_rank(p.rank, [&](auto rank) {
    launch_grouped_expand_rank<kBf16, decltype(rank)::value>(p, stream);
  });
}

/// The whole pipeline (the kernel unit's launcher).
template <bool kBf16>
void launch_grouped(const GroupedParams& p, void* stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  launch_grouped_index(p, stream);
  launch_grouped_shrink<kBf16>(p, stream);
  launch_grouped_expand<kBf16>(p, stream);
  launch_grouped_combine(p, stream);
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
