// Fused grouped shrink + expand (stage 4; spec bgmv §5, docs/decisions/bgmv-gpu-runtime.md): a
// cluster of C = R / 8 CTAs per tile (<= 16 routes of one bin). CTA q of the cluster computes the
// tile's shrink rows for rank block q from A's 8 x H block staged in shared memory, the cluster
// exchanges the rows through distributed shared memory, and CTA q then computes the tile's
// per-route partials for column block q (ceil(H / C) columns), whose B block it copies over the
// staged A block. The rows never go to HBM and back (no tile_rows) and there is no grid boundary
// between the two stages: a cluster's B copies overlap its exchange and other CTAs' shrinks.
//
// Same arithmetic as grouped_shrink_kernel (parts of 4 routes, per-thread k-tile order, warp
// reduce-scatter, splits) and grouped_expand_kernel (per-group FMA chains, butterfly lane 0):
// the shrink rows and the partials are bitwise equal, so the combine's y is too.
//
// H200 (bench/NOTES.md, session 5): against the two-kernel form, rank 16 and 64 rows 0.97-0.98
// on average (0.94-1.03), rank 32 rows 0.98-1.07 (so not used there). Measured and dropped: one
// CTA per tile (1.2-1.75x: 1.3 waves of 392 KB tiles, serial within a CTA); A read at use through
// L1/L2 (1.09x); A staged with B copied first (2 CTAs per SM, 1.36x); this form at 3 CTAs per
// SM (1.04x).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "bgmv/grouped_staged.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// Cluster barrier halves (PTX barrier.cluster): arrive with release semantics, wait with
/// acquire, so shared-memory writes before the arrive are visible to peers after their wait.
CAKEMOE_DEVICE void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
/// Arrive without ordering: for "done reading", when the values read are already in registers.
CAKEMOE_DEVICE void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
CAKEMOE_DEVICE void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/// grid (max_tiles * R / 8) x 128 in clusters of R / 8, dynamic smem
/// grouped_fused_smem_bytes(H, R).
template <bool kBf16, int kRank>
// NOTE: 4 CTAs per SM (shared memory allows 4 at H <= 3072: 48 KB); ptxas fits 123-128 registers.
__global__ void __launch_bounds__(kShrinkThreads, 4) grouped_fused_kernel(GroupedParams p) {
  extern __shared__ uint4 stage[];  // A's block during the shrink, then B's
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
  const int4 info = w.tile_info[tile];  // with the count in one trip (in bounds: max_tiles)
  if (tile >= w.header[0]) return;
  const int q = static_cast<int>(blockIdx.x) % kCluster;  // == the CTA's rank in its cluster
  const int first = info.x, routes = info.y, bin = info.z;
  const int tid = threadIdx.x;
  const int64_t h = p.hidden;

  stage_a_block(p,
                static_cast<const uint16_t*>(p.lora_a) +
                    (static_cast<int64_t>(bin) * kRank + q * kRankTile) * h,
                stage);
  if (tid < routes) spair[tid] = route_pair(p, w.sorted_routes[first + tid]);

  // ---- shrink, rank block q (grouped_shrink_kernel's order and its stage-1 layout) ----
  const int ktiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const int tiles_per_split = (ktiles + p.splits - 1) / p.splits;
  for (int part = 0; part < routes; part += kGroupShrinkPart) {
    const int n = min(kGroupShrinkPart, routes - part);
    const uint16_t* xs[kGroupShrinkPart];
#pragma unroll
    for (int i = 0; i < kGroupShrinkPart; ++i) {
      // NOTE: from sorted_routes, not spair: no barrier yet.
      xs[i] = route_x_row(p, w.sorted_routes[first + part + min(i, n - 1)], h);
    }
    // NOTE: part 0 waits for each k tile's cp.async group of stage_a_block (nothing is
    // committed after it).
    const float total = shrink_part_n<kBf16, 1>(n, p, stage + tid, nullptr, xs, part == 0, ktiles,
                                                tiles_per_split, red);
    if (tid < n * kRankTile) {
      const int i = tid / kRankTile, r = tid % kRankTile;
      const uint16_t bits = narrow<kBf16>(total);
      static_cast<uint16_t*>(
          p.shrink_out)[static_cast<int64_t>(spair[part + i]) * kRank + q * kRankTile + r] = bits;
      own_rows[part + i][r] = widen<kBf16>(bits);
    }
  }

  // B block q: columns [col0, col0 + cols), contiguous in B[bin] ([H][R]), over A's block
  // (add_split_sums ended with a barrier after every thread's last read of it).
  const int64_t block_cols = (h + kCluster - 1) / kCluster;
  const int64_t col0 = q * block_cols;
  const int cols = static_cast<int>(max(int64_t{0}, min(block_cols, h - col0)));
  {
    const uint4* src = reinterpret_cast<const uint4*>(
        static_cast<const uint16_t*>(p.lora_b) + (static_cast<int64_t>(bin) * h + col0) * kRank);
    const uint64_t b_policy = read_once_policy(p);
    for (int v = tid; v < cols * kGroups; v += kShrinkThreads) {
      dev::cp_async16_hint(stage + grouped_expand_slot<kGroups>(v / kGroups, v % kGroups),
                           src + v, b_policy);
    }
    dev::cp_async_commit();
  }

  // ---- exchange: every rank block's rows from the cluster's CTAs ----
  cluster_arrive_release();  // own_rows written
  cluster_wait();
  {
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    for (int v = tid; v < routes * kRank; v += kShrinkThreads) {
      const int i = v / kRank, c = v % kRank;
      srow[i][c] = *cluster.map_shared_rank(&own_rows[i][c % kRankTile], c / kRankTile);
    }
  }
  cluster_arrive_relaxed();  // done reading the peers' rows; every CTA waits before it exits
  dev::cp_async_wait<0>();
  __syncthreads();  // srow and the B block complete

  // ---- expand, column block q (grouped_expand_kernel's per-route arithmetic) ----
  const uint64_t partial_policy = read_again_policy(p);
  // NOTE: the rank conditions fold at compile time, so each instance keeps only its own forms.
  if (kRank <= 32 && p.fused_cols == 2) {
    // Two columns per thread per step (lc and lc + 128); a missing second column reads the
    // first's slots again (no stale reads).
    for (int lc = tid; lc < cols; lc += 2 * kShrinkThreads) {
      const int lc2 = lc + kShrinkThreads;
      const bool second = lc2 < cols;
      expand_two_columns<kBf16, kRank, 2>(p, stage, lc, second ? lc2 : lc, kShrinkThreads, second,
                                          srow, spair, routes, col0 + lc, partial_policy);
    }
  } else if (kRank == 64 && p.fused_cols == 2) {
    // Column pairs (lc even, lc + 1) to thread pairs: the loop runs to an even bound so both
    // threads of a pair take every step; a column past the block (odd cols) reads the last
    // column's B slots and stores nothing.
    const int cols_even = (cols + 1) & ~1;
    const int half = tid & 1, lane = tid & 31;
    for (int lc = tid; lc < cols_even; lc += kShrinkThreads) {
      const int pair[2] = {lc & ~1, min(lc | 1, cols - 1)};
      float b[2][32];
      unpack_pair_b<kBf16>(stage, pair, half, b);
      // The warp's lanes in this step: those whose column is below cols_even (a prefix).
      const int in_step = min(32, cols_even - (lc - lane));
      const unsigned live = in_step >= 32 ? 0xFFFFFFFFu : (1u << in_step) - 1u;
      const int64_t c = col0 + lc;
      for (int i = 0; i < routes; ++i) {
        const float v = expand_pair_partial(srow[i], b, half, live);
        if (lc < cols) {
          dev::st_global_hint(p.partials + static_cast<int64_t>(spair[i]) * h + c, v,
                              partial_policy);
        }
      }
    }
  } else {
    for (int lc = tid; lc < cols; lc += kShrinkThreads) {
      const int64_t c = col0 + lc;
      float b[kRank];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        dev::unpack8<!kBf16>(stage[grouped_expand_slot<kGroups>(lc, g)], b + 8 * g);
      }
      const auto route = [&](int i) {
        dev::st_global_hint(p.partials + static_cast<int64_t>(spair[i]) * h + c,
                            route_partial<kRank>(srow[i], b), partial_policy);
      };
      if constexpr (kRank <= 16) {
#pragma unroll 2
        for (int i = 0; i < routes; ++i) route(i);
      } else {
        for (int i = 0; i < routes; ++i) route(i);
      }
    }
  }
  cluster_wait();  // the peers have read this CTA's rows
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
