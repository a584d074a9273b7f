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

/// Forms of the fused kernel (A/B runs, CAKEMOE_BGMV_FUSED_FORM; the bits do not depend on it):
/// 0 A through L1/L2 (plain loads at use), B copied first; 1 the same with the next k tile's A
/// loaded before this tile's FMAs; 2 A's 8 x H block copied into shared memory (cp.async, one
/// group per k tile, the stage-1 layout), then B behind it; 3 A staged, B copied over A's
/// block once the shrink is done (half the shared memory); 4 form 3 at 4 CTAs per SM (<= 128
/// registers).
template <int kForm>
struct FusedForm {
  static constexpr bool kPrefetchA = kForm == 1;
  static constexpr bool kStageA = kForm >= 2;
  static constexpr bool kBAfter = kForm >= 3;
  static constexpr int kMinBlocks = kForm == 2 ? 2 : (kForm == 4 ? 4 : 3);
};

/// Dynamic shared memory of form kForm: A's staged block and / or the B block.
template <int kForm>
CAKEMOE_HD int64_t fused_form_smem_bytes(int64_t hidden, int rank) {
  const int64_t b = grouped_fused_smem_bytes(hidden, rank);
  if (!FusedForm<kForm>::kStageA) return b;
  const int64_t a = kRankTile * grouped_stage_row_bytes(hidden);
  return FusedForm<kForm>::kBAfter ? (a > b ? a : b) : a + b;
}

/// grid (max_tiles * R / 8) x 128 in clusters of R / 8, dynamic smem
/// fused_form_smem_bytes<kForm>(H, R).
template <bool kBf16, int kRank, int kForm>
__global__ void __launch_bounds__(kShrinkThreads, FusedForm<kForm>::kMinBlocks)
    grouped_fused_kernel(GroupedParams p) {
  using Form = FusedForm<kForm>;
  extern __shared__ uint4 dyn[];
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
  const int ktiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const uint16_t* a_global = static_cast<const uint16_t*>(p.lora_a) +
                             (static_cast<int64_t>(bin) * kRank + q * kRankTile) * h;
  // Staged A vector (row r, k tile t) of this thread: astage[(t * 8 + r) * 128 + tid].
  uint4* astage = dyn;
  if constexpr (Form::kStageA) {
    for (int t = 0; t < ktiles; ++t) {
      const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
      if (k0 < h) {  // H % 8 == 0: a vector is wholly inside or outside
#pragma unroll
        for (int r = 0; r < kRankTile; ++r) {
          dev::cp_async16(astage + (t * kRankTile + r) * kShrinkThreads + tid, a_global + r * h + k0,
                          true);
        }
      }
      dev::cp_async_commit();
    }
  }
  uint4* bstage = Form::kStageA && !Form::kBAfter ? dyn + ktiles * kRankTile * kShrinkThreads : dyn;

  // B block q: columns [col0, col0 + cols), contiguous in B[bin] ([H][R]).
  const int64_t block_cols = (h + kCluster - 1) / kCluster;
  const int64_t col0 = q * block_cols;
  const int cols = static_cast<int>(max(int64_t{0}, min(block_cols, h - col0)));
  const auto copy_b = [&]() {
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.lora_b) +
                                                      (static_cast<int64_t>(bin) * h + col0) * kRank);
    for (int v = tid; v < cols * kGroups; v += kShrinkThreads) {
      dev::cp_async16(bstage + grouped_expand_slot<kGroups>(v / kGroups, v % kGroups), src + v,
                      true);
    }
    dev::cp_async_commit();
  };
  if constexpr (!Form::kBAfter) copy_b();
  if (tid < routes) spair[tid] = w.sorted_routes[first + tid];

  // ---- shrink, rank block q (grouped_shrink_kernel's order) ----
  const int tiles_per_split = (ktiles + p.splits - 1) / p.splits;
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
      uint4 a_next[Form::kPrefetchA ? kRankTile : 1];
      const auto fetch = [&](int t) {
        const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
        if (k0 >= h) return;
#pragma unroll
        for (int i = 0; i < kGroupShrinkPart; ++i) {
          if (i < n) x_next[i] = *reinterpret_cast<const uint4*>(xs[i] + k0);
        }
        if constexpr (Form::kPrefetchA) {
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
        if constexpr (Form::kStageA) {
          // this tile's group landed (later groups: A's later tiles, then B unless it comes after)
          if (part == 0) cp_async_wait_upto(ktiles - 1 - t + (Form::kBAfter ? 0 : 1));
        }
        uint4 x_now[kGroupShrinkPart];
        uint4 a_now[Form::kPrefetchA ? kRankTile : 1];
#pragma unroll
        for (int i = 0; i < kGroupShrinkPart; ++i) x_now[i] = x_next[i];
        if constexpr (Form::kPrefetchA) {
#pragma unroll
          for (int r = 0; r < kRankTile; ++r) a_now[r] = a_next[r];
        }
        if (t + 1 < t1) fetch(t + 1);
        const auto load_x = [&](int i, float* out) { dev::unpack8<!kBf16>(x_now[i], out); };
        const auto load_a = [&](int r, float* out) {
          if constexpr (Form::kPrefetchA) {
            dev::unpack8<!kBf16>(a_now[r], out);
          } else if constexpr (Form::kStageA) {
            dev::unpack8<!kBf16>(astage[(t * kRankTile + r) * kShrinkThreads + tid], out);
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

  // add_split_sums ended with a barrier after every thread's last read of A's staged block
  if constexpr (Form::kBAfter) copy_b();
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
  // Done reading the peers' rows (their values are in srow already: relaxed is enough); each
  // CTA waits for this before it exits.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
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
