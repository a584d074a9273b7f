// Fused grouped shrink + expand (stage 4; spec bgmv §5, docs/decisions/bgmv-gpu-runtime.md): a
// cluster of C = R / 8 CTAs per tile (<= 16 routes of one bin). CTA q of the cluster computes the
// tile's shrink rows for rank block q, the cluster exchanges them through distributed shared
// memory, and CTA q then computes the tile's per-route partials for column block q (H / C
// columns). Its B block (H / C columns x R, contiguous) is copied into shared memory right at
// the start, so those loads are in flight during the shrink; the rows never go to HBM and back
// (no tile_rows) and there is no grid boundary between the two stages.
//
// Same arithmetic as grouped_shrink_kernel (parts of 4 routes, per-thread k-tile order, warp
// reduce-scatter, splits) and grouped_expand_kernel (per-group FMA chains, butterfly lane 0):
// the shrink rows and the partials are bitwise equal, so the combine's y is too.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "bgmv/grouped_compute.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// Cluster barrier halves (PTX barrier.cluster): arrive with release semantics, wait with
/// acquire, so shared-memory writes before the arrive are visible to peers after their wait.
CAKEMOE_DEVICE void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
CAKEMOE_DEVICE void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/// grid (max_tiles * R / 8) x 128 in clusters of R / 8, dynamic smem
/// grouped_fused_smem_bytes(H, R). kMinBlocks: CTAs per SM the register bound allows;
/// kPrefetchA: the next k tile's A vectors are loaded before this tile's FMAs (like x's).
template <bool kBf16, int kRank, int kMinBlocks, bool kPrefetchA>
__global__ void __launch_bounds__(kShrinkThreads, kMinBlocks) grouped_fused_kernel(GroupedParams p) {
  extern __shared__ uint4 bstage[];  // this CTA's B block, grouped_expand_slot order
  __shared__ SplitSums red;
  __shared__ float own_rows[kGroupTileRoutes][kRankTile];  // rank block q, read by the peers
  __shared__ float srow[kGroupTileRoutes][kRank];
  __shared__ int spair[kGroupTileRoutes];
  constexpr int kGroups = kRank / 8;
  constexpr int kCluster = kRank / kRankTile;
  dev::pdl_wait();  // the index is complete
  dev::pdl_trigger();
  const GroupedWs w = grouped_ws(p);
  const int tile = static_cast<int>(blockIdx.x) / kCluster;
  // NOTE: every CTA of a cluster has the same tile, so a cluster exits whole (no orphaned
  // cluster barrier).
  if (tile >= w.header[0]) return;
  const int q = static_cast<int>(blockIdx.x) % kCluster;  // == the CTA's rank in its cluster
  const int4 info = w.tile_info[tile];
  const int first = info.x, routes = info.y, bin = info.z;
  const int tid = threadIdx.x;
  const int64_t h = p.hidden;

  // B block q: columns [col0, col0 + cols), contiguous in B[bin] ([H][R]).
  const int64_t block_cols = (h + kCluster - 1) / kCluster;
  const int64_t col0 = q * block_cols;
  const int cols = static_cast<int>(max(int64_t{0}, min(block_cols, h - col0)));
  {
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.lora_b) +
                                                      (static_cast<int64_t>(bin) * h + col0) * kRank);
    for (int v = tid; v < cols * kGroups; v += kShrinkThreads) {
      dev::cp_async16(bstage + grouped_expand_slot<kGroups>(v / kGroups, v % kGroups), src + v,
                      true);
    }
    dev::cp_async_commit();
  }
  if (tid < routes) spair[tid] = w.sorted_routes[first + tid];

  // ---- shrink, rank block q (grouped_shrink_kernel's order; A through L1/L2) ----
  const int ktiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const int tiles_per_split = (ktiles + p.splits - 1) / p.splits;
  const uint16_t* a_global = static_cast<const uint16_t*>(p.lora_a) +
                             (static_cast<int64_t>(bin) * kRank + q * kRankTile) * h;
  for (int part = 0; part < routes; part += kGroupShrinkPart) {
    const int n = min(kGroupShrinkPart, routes - part);
    const uint16_t* xs[kGroupShrinkPart];
#pragma unroll
    for (int i = 0; i < kGroupShrinkPart; ++i) {
      const int pair = w.sorted_routes[first + part + min(i, n - 1)];
      xs[i] = static_cast<const uint16_t*>(p.x) + p.sorted_token_ids[pair] * h;
    }
    float total = 0.0f;  // owned by thread i * 8 + r < 32
    for (int z = 0; z < p.splits; ++z) {
      const int t0 = min(z * tiles_per_split, ktiles);
      const int t1 = min((z + 1) * tiles_per_split, ktiles);
      float acc[kGroupShrinkPart][kRankTile];
#pragma unroll
      for (int i = 0; i < kGroupShrinkPart; ++i) {
#pragma unroll
        for (int r = 0; r < kRankTile; ++r) acc[i][r] = 0.0f;
      }
      uint4 x_next[kGroupShrinkPart];
      uint4 a_next[kPrefetchA ? kRankTile : 1];
      const auto fetch = [&](int t) {
        const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
        if (k0 >= h) return;
#pragma unroll
        for (int i = 0; i < kGroupShrinkPart; ++i) {
          if (i < n) x_next[i] = *reinterpret_cast<const uint4*>(xs[i] + k0);
        }
        if constexpr (kPrefetchA) {
#pragma unroll
          for (int r = 0; r < kRankTile; ++r) {
            a_next[r] = *reinterpret_cast<const uint4*>(a_global + r * h + k0);
          }
        }
      };
      if (t0 < t1) fetch(t0);
      for (int t = t0; t < t1; ++t) {
        const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
        if (k0 >= h) continue;  // only in the last k tile: nothing to fetch after it
        uint4 x_now[kGroupShrinkPart];
        uint4 a_now[kPrefetchA ? kRankTile : 1];
#pragma unroll
        for (int i = 0; i < kGroupShrinkPart; ++i) x_now[i] = x_next[i];
        if constexpr (kPrefetchA) {
#pragma unroll
          for (int r = 0; r < kRankTile; ++r) a_now[r] = a_next[r];
        }
        if (t + 1 < t1) fetch(t + 1);
        const auto load_x = [&](int i, float* out) { dev::unpack8<!kBf16>(x_now[i], out); };
        const auto load_a = [&](int r, float* out) {
          if constexpr (kPrefetchA) {
            dev::unpack8<!kBf16>(a_now[r], out);
          } else {
            load8<kBf16>(a_global + r * h + k0, out);
          }
        };
        shrink_tile_n(n, load_x, load_a, acc);
      }
      add_split_sums(n, acc, red, &total);
    }
    if (tid < n * kRankTile) {
      const int i = tid / kRankTile, r = tid % kRankTile;
      const uint16_t bits = narrow<kBf16>(total);
      static_cast<uint16_t*>(p.shrink_out)[static_cast<int64_t>(spair[part + i]) * kRank +
                                           q * kRankTile + r] = bits;
      own_rows[part + i][r] = widen<kBf16>(bits);
    }
  }

  // ---- exchange: every rank block's rows from the cluster's CTAs ----
  cluster_arrive();  // own_rows written (release)
  cluster_wait();
  {
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    for (int v = tid; v < routes * kRank; v += kShrinkThreads) {
      const int i = v / kRank, c = v % kRank;
      const float* peer = cluster.map_shared_rank(&own_rows[i][c % kRankTile], c / kRankTile);
      srow[i][c] = *peer;
    }
  }
  cluster_arrive();  // done reading the peers' rows; each CTA waits before it exits
  dev::cp_async_wait<0>();
  __syncthreads();  // srow and the B block complete

  // ---- expand, column block q (grouped_expand_kernel's per-route arithmetic) ----
  for (int lc = tid; lc < cols; lc += kShrinkThreads) {
    const int64_t c = col0 + lc;
    float b[kRank];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      dev::unpack8<!kBf16>(bstage[grouped_expand_slot<kGroups>(lc, g)], b + 8 * g);
    }
    const auto route = [&](int i) {
      float lanes[kGroups];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        float part = 0.0f;
#pragma unroll
        for (int r = 8 * g; r < 8 * g + 8; ++r) part = fmaf(srow[i][r], b[r], part);
        lanes[g] = part;
      }
      p.partials[static_cast<int64_t>(spair[i]) * h + c] = dev::butterfly_lane0<kGroups>(lanes);
    };
    if constexpr (kRank <= 16) {
#pragma unroll 2
      for (int i = 0; i < routes; ++i) route(i);
    } else {
      for (int i = 0; i < routes; ++i) route(i);
    }
  }
  cluster_wait();  // the peers have read this CTA's rows
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
