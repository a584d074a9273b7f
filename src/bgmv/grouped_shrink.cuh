// Grouped shrink (spec bgmv §5): A rows read once per part of 4 routes of one bin, in the
// canonical per-route FP32 order of §3.2, so the rows are bitwise equal to the per-route shrink's.
// The rows go to shrink_out by pair and to tile_rows by sorted position (the expand's one-trip
// read).
#pragma once

#include <cstdint>

#include "bgmv/grouped_index.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

constexpr int kShrinkThreads = kGroupShrinkThreads;
constexpr int kShrinkTileK = kGroupShrinkTileK;
constexpr int kRankTile = kGroupRankTile;

/// Waits until this thread's cp.async groups up to `pending` from the newest have landed
/// (`pending` past 7 waits for more than needed: groups complete in order).
CAKEMOE_DEVICE void cp_async_wait_upto(int pending) {
  switch (pending) {
    case 0:
      ptx::cp_async_wait<0>();
      break;
    case 1:
      ptx::cp_async_wait<1>();
      break;
    case 2:
      ptx::cp_async_wait<2>();
      break;
    case 3:
      ptx::cp_async_wait<3>();
      break;
    case 4:
      ptx::cp_async_wait<4>();
      break;
    case 5:
      ptx::cp_async_wait<5>();
      break;
    case 6:
      ptx::cp_async_wait<6>();
      break;
    default:
      ptx::cp_async_wait<7>();
      break;
  }
}

/// One k tile of the shrink for the first kN routes of a part: acc[i][r] += xv[i] . a_r over this
/// thread's 8 elements in ascending order (spec §3.2). kN is compile-time so the loads and FMAs of
/// the whole tile schedule freely (no per-route branch).
template <int kN, typename LoadA>
CAKEMOE_DEVICE void shrink_tile(const float (&xv)[kN][8], const LoadA& load_a,
                                float (&acc)[kGroupShrinkPart][kRankTile]) {
#pragma unroll
  for (int r = 0; r < kRankTile; ++r) {
    float av[8];
    load_a(r, av);
#pragma unroll
    for (int i = 0; i < kN; ++i) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][r] = fmaf(xv[i][e], av[e], acc[i][r]);
    }
  }
}

/// Shared memory of the split reduction: one sum per (warp, route, rank row).
using SplitSums = float[4][kGroupShrinkPart][kRankTile];

/// Warp sums of the first kRoutes routes' accumulators (kRoutes x 8 slots, padded with zeros to
/// a power of two) by dev::warp_reduce_scatter: bitwise the XOR butterflies 16 .. 1 of each
/// slot. Lane l's slot (route i, rank row r) goes to red[warp][i][r].
template <int kRoutes>
CAKEMOE_DEVICE void warp_sums_to_shared(const float (&acc)[kGroupShrinkPart][kRankTile],
                                        SplitSums& red) {
  constexpr int kSlots = kRoutes * kRankTile <= 8 ? 8 : (kRoutes * kRankTile <= 16 ? 16 : 32);
  float v[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    v[s] = s / kRankTile < kRoutes ? acc[s / kRankTile][s % kRankTile] : 0.0f;
  }
  const float sum = dev::warp_reduce_scatter<kSlots>(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr int kLanesPerSlot = 32 / kSlots;
  if (lane % kLanesPerSlot == 0) {
    const int slot = lane / kLanesPerSlot;
    if (slot < kRoutes * kRankTile) red[warp][slot / kRankTile][slot % kRankTile] = sum;
  }
}

/// The end of one split of a part (spec §3.2): the warp XOR butterflies (16 .. 1) of the live
/// routes' accumulators, then the warp sums in warp order from 0.0f, added to `total` by thread
/// i * 8 + r < 8 n. Every thread of the 128-thread CTA calls it (two barriers).
CAKEMOE_DEVICE void add_split_sums(int n, const float (&acc)[kGroupShrinkPart][kRankTile],
                                   SplitSums& red, float* total) {
  const int tid = threadIdx.x;
  switch (n) {  // CTA-uniform
    case 1:
      warp_sums_to_shared<1>(acc, red);
      break;
    case 2:
      warp_sums_to_shared<2>(acc, red);
      break;
    case 3:
      warp_sums_to_shared<3>(acc, red);
      break;
    default:
      warp_sums_to_shared<4>(acc, red);
      break;
  }
  __syncthreads();
  if (tid < n * kRankTile) {
    const int i = tid / kRankTile, r = tid % kRankTile;
    float sum = 0.0f;
    for (int wi = 0; wi < 4; ++wi) sum = sum + red[wi][i][r];
    *total = *total + sum;
  }
  __syncthreads();
}

/// The part's rows (routes at sorted positions pos .. pos + n - 1, rank rows of `rank_block`):
/// to shrink_out by pair and to tile_rows by sorted position.
template <bool kBf16>
CAKEMOE_DEVICE void store_part_rows(const GroupedParams& p, const GroupedWs& w, int pos, int n,
                                    int rank_block, float total) {
  const int tid = threadIdx.x;
  if (tid >= n * kRankTile) return;
  const int i = tid / kRankTile, r = tid % kRankTile;
  const uint16_t bits = narrow<kBf16>(total);
  const int column = rank_block * kRankTile + r;
  const int64_t pair = route_pair(p, w.sorted_routes[pos + i]);
  static_cast<uint16_t*>(p.shrink_out)[pair * p.rank + column] = bits;
  w.tile_rows[static_cast<int64_t>(pos + i) * p.rank + column] = bits;
}

/// One part of kN routes (x rows xs[0, kN)) over every hidden split: the per-thread fma chains
/// over the split's k tiles (shrink_tile), then add_split_sums into `total`. Tile t + 1's x
/// vectors are loaded before tile t's FMAs. kN is compile-time and the loads unconditional, so
/// no instruction goes to routes past the part or to keeping unloaded registers (the route-count
/// branches cost ~35 moves per k tile, and the shrink is issue-bound: SM90,
/// bench/results/*_0fc553d_*, grouped rows 0.98). `stage_tid`: this thread's first staged vector
/// (kStage >= 1); `part0`: the tile's first part (its A copies are still landing; kStage 2 also
/// staged its x rows).
template <bool kBf16, int kStage, int kN>
CAKEMOE_DEVICE void shrink_part(const GroupedParams& p, const uint4* stage_tid,
                                const uint16_t* a_global,
                                const uint16_t* const (&xs)[kGroupShrinkPart], bool part0,
                                int tiles, int tiles_per_split, SplitSums& red, float* total) {
  constexpr int kRows = kRankTile + (kStage == 2 ? kGroupShrinkPart : 0);
  const int tid = threadIdx.x;
  const int64_t h = p.hidden;
  const bool x_staged = kStage == 2 && part0;
  for (int z = 0; z < p.splits; ++z) {
    const int t0 = min(z * tiles_per_split, tiles), t1 = min((z + 1) * tiles_per_split, tiles);
    float acc[kGroupShrinkPart][kRankTile];
#pragma unroll
    for (int i = 0; i < kGroupShrinkPart; ++i) {
#pragma unroll
      for (int r = 0; r < kRankTile; ++r) acc[i][r] = 0.0f;
    }
    uint4 x_next[kN];
    // NOTE: the k offset is clamped so the loads need no branch (a thread past H in the last tile
    // reloads its last vector and skips that tile's FMAs).
    const auto fetch_x = [&](int t) {
      const int64_t k0 = min(static_cast<int64_t>(t) * kShrinkTileK + 8 * tid, h - 8);
#pragma unroll
      for (int i = 0; i < kN; ++i) x_next[i] = *reinterpret_cast<const uint4*>(xs[i] + k0);
    };
    if (!x_staged && t0 < t1) fetch_x(t0);
    for (int t = t0; t < t1; ++t) {
      const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
      const uint4* staged = stage_tid + static_cast<int64_t>(t) * kRows * kShrinkThreads;
      if constexpr (kStage >= 1) {
        if (part0) cp_async_wait_upto(tiles - 1 - t);
      }
      // NOTE: this tile's x vectors are widened before the next tile's fetch, and both happen on
      // every path (a thread past H in the last tile skips only the FMAs): with a kept copy of
      // the vectors and a branch around the fetch ptxas moved them twice per k tile (~32 moves
      // in an issue-bound loop) and spilled; now once, at the back edge (sm_90a, 4 routes: 470
      // -> 450 instructions per k tile, no spill).
      float xv[kN][8];
#pragma unroll
      for (int i = 0; i < kN; ++i) {
        if (x_staged) {
          dev::unpack8<!kBf16>(staged[(kRankTile + i) * kShrinkThreads], xv[i]);
        } else {
          dev::unpack8<!kBf16>(x_next[i], xv[i]);
        }
      }
      if (!x_staged) fetch_x(min(t + 1, t1 - 1));  // the last tile refetches its own (unused)
      const auto load_a = [&](int r, float* out) {
        if constexpr (kStage >= 1) {
          dev::unpack8<!kBf16>(staged[r * kShrinkThreads], out);
        } else {
          load8<kBf16>(a_global + r * h + k0, out);
        }
      };
      if (k0 < h) shrink_tile<kN>(xv, load_a, acc);
    }
    add_split_sums(kN, acc, red, total);
  }
}

/// shrink_part for a part of n = 1..4 routes (CTA-uniform); returns the part's total.
template <bool kBf16, int kStage>
CAKEMOE_DEVICE float shrink_part_n(int n, const GroupedParams& p, const uint4* stage_tid,
                                   const uint16_t* a_global,
                                   const uint16_t* const (&xs)[kGroupShrinkPart], bool part0,
                                   int tiles, int tiles_per_split, SplitSums& red) {
  float total = 0.0f;  // owned by thread i * 8 + r < 8 n
  switch (n) {
    case 1:
      shrink_part<kBf16, kStage, 1>(p, stage_tid, a_global, xs, part0, tiles, tiles_per_split, red,
                                    &total);
      break;
    case 2:
      shrink_part<kBf16, kStage, 2>(p, stage_tid, a_global, xs, part0, tiles, tiles_per_split, red,
                                    &total);
      break;
    case 3:
      shrink_part<kBf16, kStage, 3>(p, stage_tid, a_global, xs, part0, tiles, tiles_per_split, red,
                                    &total);
      break;
    default:
      shrink_part<kBf16, kStage, 4>(p, stage_tid, a_global, xs, part0, tiles, tiles_per_split, red,
                                    &total);
      break;
  }
  return total;
}

/// grid max_tiles * R / 8 (tile-major) x 128: the shrink rows of one tile (<= 16 routes of one
/// bin) for 8 rank rows, in parts of 4 routes (32 accumulators per thread). kGroupStageA: the
/// 8 x H block of A is copied into dynamic shared memory once and every part reads it there;
/// kGroupStageAX: also the x rows of the first part. The copy is thread-private (each thread
/// copies the 16-byte vectors it later reads: vector k-tile t, lane tid) and committed one group
/// per k tile, so tile 0's arithmetic runs while later tiles are in flight, with no barrier.
/// kGroupStageNone: parts after the first re-read A through L1/L2. The arithmetic is the same in
/// every form.
template <bool kBf16, int kStage>
// NOTE: stage 2's shared memory allows 3 CTAs per SM, so its bound lets ptxas use up to 170
// registers instead of spilling at 128; stage 1 (49 KB at H 3072) fits 4, which its 128
// registers keep (ptxas: 125-128, no spill), stage 0 has no shared memory and needs ~150.
__global__ void __launch_bounds__(kShrinkThreads, kStage == 1 ? 4 : 3)
    grouped_shrink_kernel(GroupedParams p) {
  extern __shared__ uint4 stage_vec[];
  __shared__ SplitSums red;
  ptx::griddep_wait();  // the index is complete
  ptx::griddep_launch_dependents();
  const GroupedWs w = grouped_ws(p);
  // Tile-major grid: a tile's rank blocks run side by side and share the x rows' first trip to
  // HBM (the (tile, rank block) grid measured 1.016-1.030 on rank 32 / 64 grouped rows).
  const int rank_blocks = p.rank / kRankTile;
  const int tile = static_cast<int>(blockIdx.x) / rank_blocks;
  const int rank_block = static_cast<int>(blockIdx.x) % rank_blocks;
  // NOTE: the tile count and the tile in one trip (the grid has max_tiles tiles, so the read is
  // in bounds; past the count it is stale and unused).
  const int4 info = w.tile_info[tile];
  if (tile >= w.header[0]) return;
  const int first = info.x, routes = info.y, bin = info.z;
  const int tid = threadIdx.x;
  const int64_t h = p.hidden;
  const int tiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const uint16_t* a_global = static_cast<const uint16_t*>(p.lora_a) +
                             (static_cast<int64_t>(bin) * p.rank + rank_block * kRankTile) * h;
  const int first_part = min(kGroupShrinkPart, routes);
  const uint16_t* x_first[kGroupShrinkPart];
#pragma unroll
  for (int i = 0; i < kGroupShrinkPart; ++i) {
    x_first[i] = route_x_row(p, w.sorted_routes[first + min(i, first_part - 1)], h);
  }
  // Staged vector (row, t) of this thread: stage_vec[(t * rows + row) * 128 + tid], rows = A's 8
  // then (kStage 2) the first part's x rows.
  constexpr int kRows = kRankTile + (kStage == 2 ? kGroupShrinkPart : 0);
  if constexpr (kStage >= 1) {
    const uint64_t a_policy = read_once_policy();
    for (int t = 0; t < tiles; ++t) {
      const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
      if (k0 < h) {  // H % 8 == 0: a vector is wholly inside or outside
        uint4* dst = stage_vec + static_cast<int64_t>(t) * kRows * kShrinkThreads + tid;
#pragma unroll
        for (int r = 0; r < kRankTile; ++r) {
          ptx::cp_async_16_l2_hint(dst + r * kShrinkThreads, a_global + r * h + k0, a_policy);
        }
        if constexpr (kStage == 2) {
          for (int i = 0; i < first_part; ++i) {
            ptx::cp_async_16(dst + (kRankTile + i) * kShrinkThreads, x_first[i] + k0, true);
          }
        }
      }
      ptx::cp_async_commit();
    }
  }
  const int tiles_per_split = (tiles + p.splits - 1) / p.splits;
  for (int part = 0; part < routes; part += kGroupShrinkPart) {
    const int n = min(kGroupShrinkPart, routes - part);
    const uint16_t* xs[kGroupShrinkPart];
#pragma unroll
    for (int i = 0; i < kGroupShrinkPart; ++i) {
      const int entry = w.sorted_routes[first + part + min(i, n - 1)];
      xs[i] = part == 0 ? x_first[i] : route_x_row(p, entry, h);
    }
    const float total = shrink_part_n<kBf16, kStage>(n, p, stage_vec + tid, a_global, xs, part == 0,
                                                     tiles, tiles_per_split, red);
    store_part_rows<kBf16>(p, w, first + part, n, rank_block, total);
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
