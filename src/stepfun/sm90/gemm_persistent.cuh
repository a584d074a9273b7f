// The persistent sm90 FC1 / FC2 kernel for bf16 / fp8 (the "p" variant units, tile_config.h
// has_sm90_persistent_unit) and its binder. ctas_per_sm(tile) CTAs per SM for the whole grid; CTA
// b takes the work items b, b + grid, b + 2 grid, ... (item = token tile x 128-row weight block,
// in the order of cta_coord with raster group p_group(tile)). The roles of gemm_kernel.cuh stay: warp 0 lane 0 streams
// weight boxes by TMA, warps 1..3 gather token rows, two consumer warpgroups multiply and run the
// epilogue; each role walks the same items and carries its stage pipeline position from one item
// to the next, so the producers fill the next item's stages while the consumers finish the last.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/launch_pdl.h"
#include "ptx/sync.cuh"
#include "stepfun/sm90/epilogue.cuh"
#include "stepfun/sm90/gemm_kernel.cuh"
#include "stepfun/sm90/mainloop_ss.cuh"
#include "stepfun/sm90/params.h"
#include "stepfun/sm90/tile_config.h"
#include "stepfun/sm90/tile_scheduler.cuh"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

/// Shared-memory carve-up of a persistent CTA: SmemLayout with p_stages_for(N) stages plus the
/// epilogue's own staging tile (the stage buffers hold the next item's operands while the
/// epilogue runs).
template <int N>
struct PersistentLayout : SmemLayout<N, p_stages_for(N)> {
  using Base = SmemLayout<N, p_stages_for(N)>;
  static constexpr int kStaging = (Base::kEnd + 15) / 16 * 16;
  static_assert(Base::kStages >= 2, "the gather needs two stages");
  static_assert(kStaging + p_staging_bytes(N) + 1024 <= p_smem_bytes(N),
                "tile_config.h p_smem_bytes is too small");
};

constexpr int kGatherBarrier = 2;  ///< named barrier of the gather warps (epilogue.cuh uses 1)

/// Work items of the grid: the CTA numbers of the main kernel's grid up to the last live token
/// tile's group (the tables' count, read once); the ids in it without work are skipped.
CAKEMOE_DEVICE int64_t persistent_items(const GemmTileTables& t, int32_t m_blocks, int group) {
  const int64_t live = *t.num_non_exiting_ctas;
  return grid_ctas(live < t.max_ctas ? live : t.max_ctas, m_blocks, group);
}

template <Family F, bool kFc1, int N>
__global__ void __launch_bounds__(kThreads, ctas_per_sm(N)) sm90_gemm_persistent_kernel(
    const __grid_constant__ GemmParams<std::conditional_t<kFc1, Fc1Params, Fc2Params>> params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(F == Family::kBF16 || F == Family::kFP8, "the persistent units are SS units");
  using L = PersistentLayout<N>;
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  const auto& p = params.p;
  constexpr int kGroup = p_group(N);
  const int64_t items = persistent_items(p.tables, params.m_blocks, kGroup);
  if (static_cast<int64_t>(blockIdx.x) >= items) return;

  uint8_t* smem = swizzle_aligned_smem();
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  auto* row_src = reinterpret_cast<int32_t*>(smem + L::kRowSrc);
  const GemmShape shape = shape_of<F>(p);
  const int tid = threadIdx.x;
  if (tid == 0) {
    init_stage_barriers(full, empty, L::kStages, 1 + kGatherThreads, kConsumerWarps);
    ptx::fence_barrier_init();
  }
  __syncthreads();

  // Every role walks the same items; an item without work (a corrupted table entry) is skipped
  // by all of them alike, as they read the same table words.
  PipeState ps;
  const auto walk = [&](auto&& run) {
    for (int64_t id = blockIdx.x; id < items; id += gridDim.x) {
      TileWork w;
      if (tile_work_at(p.tables, p.num_experts, params.m_blocks, kGroup, id, &w)) run(w);
    }
  };
  if (tid == 0) {
    walk([&](const TileWork& w) {
      produce_weights<F, N, L>(&params.weights_map, smem, shape.num_k, shape.weight_rows, w, ps);
    });
  } else if (tid >= 32 && tid < 128) {
    const int gtid = tid - 32;
    walk([&](const TileWork& w) {
      // Every gather thread is past the last item's rows before they are replaced.
      ptx::named_barrier_sync(kGatherBarrier, kGatherThreads);
      for (int r = gtid; r < N; r += kGatherThreads) row_src[r] = tile_row_source(p, w, r);
      ptx::named_barrier_sync(kGatherBarrier, kGatherThreads);
      produce_tokens<N, L>(shape.tokens, shape.token_row_bytes, row_src, smem, shape.num_k, gtid,
                           ps);
    });
  } else if (tid >= 128) {
    const int ctid = tid - 128;
    walk([&](const TileWork& w) {
      float acc[N / 2];
      consume<F, N, L>(smem, shape.num_k, ctid / 128, acc, ps);
      // NOTE: the SS epilogues read no row sources (only nvfp4_bf16tok's FC1 does).
      if constexpr (kFc1) {
        fc1_epilogue<F, N>(p, w, row_src, acc, smem + L::kStaging, ctid);
      } else {
        fc2_epilogue<F, N>(p, w, acc, smem + L::kStaging, ctid);
      }
    });
  }
#endif
}

#if defined(__CUDACC__)
/// Binder of the persistent units: the main units' parameters, a grid of ctas_per_sm CTAs per SM
/// of the current device (capped at the largest number of items) and the closure that enqueues
/// it.
template <Family F, bool kFc1, int N>
GemmEnqueue bind_sm90_gemm_persistent(const std::conditional_t<kFc1, Fc1Params, Fc2Params>& p) {
  static const bool configured = allow_smem(
      reinterpret_cast<const void*>(sm90_gemm_persistent_kernel<F, kFc1, N>), p_smem_bytes(N));
  (void)configured;
  const auto params = sm90_gemm_params<F, kFc1>(p);
  int device = 0, sms = 0;
  CAKEMOE_CUDA_CHECK(cudaGetDevice(&device));
  CAKEMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t most = grid_ctas(p.tables.max_ctas, params.m_blocks, p_group(N));
  const int64_t resident = int64_t{ctas_per_sm(N)} * sms;
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(most, resident))));
  return [params, grid](Stream stream) {
    core::launch_dependent(sm90_gemm_persistent_kernel<F, kFc1, N>, grid, dim3(kThreads),
                           p_smem_bytes(N), static_cast<cudaStream_t>(stream), params);
  };
}
#endif  // __CUDACC__

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
