// Grouped pipeline compute stages (spec bgmv §5): grouped shrink (A rows read once per part of
// 4 routes of one bin, canonical per-route FP32 order of §3.2 -> rows bitwise equal to the
// per-route shrink) and grouped expand (B rows read once per tile of <= 16 routes; unweighted
// per-route partials), combine (weights applied per route in ascending pair order; the
// reference::bgmv grouped order, docs/decisions/bgmv.md).
#pragma once

#include <cstdint>

#include "bgmv/grouped_index.cuh"

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
      dev::cp_async_wait<0>();
      break;
    case 1:
      dev::cp_async_wait<1>();
      break;
    case 2:
      dev::cp_async_wait<2>();
      break;
    case 3:
      dev::cp_async_wait<3>();
      break;
    case 4:
      dev::cp_async_wait<4>();
      break;
    case 5:
      dev::cp_async_wait<5>();
      break;
    case 6:
      dev::cp_async_wait<6>();
      break;
    default:
      dev::cp_async_wait<7>();
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

/// One route's unweighted partials for kCols columns (the grouped order of spec §3.2): per column
/// and rank group g an FMA chain over r = 8g .. 8g + 7 from 0, then lane 0 of the XOR butterfly
/// (offsets G/2 .. 1) over the groups. `row`: the route's shrink row widened to fp32, each value
/// read once for all columns; `b[u]`: column u's B row.
template <int kRank, int kCols>
CAKEMOE_DEVICE void route_partials(const float* row, const float (&b)[kCols][kRank],
                                   float (&out)[kCols]) {
  constexpr int kGroups = kRank / 8;
  float lanes[kCols][kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    float part[kCols];
#pragma unroll
    for (int u = 0; u < kCols; ++u) part[u] = 0.0f;
#pragma unroll
    for (int r = 8 * g; r < 8 * g + 8; ++r) {
      const float v = row[r];
#pragma unroll
      for (int u = 0; u < kCols; ++u) part[u] = fmaf(v, b[u][r], part[u]);
    }
#pragma unroll
    for (int u = 0; u < kCols; ++u) lanes[u][g] = part[u];
  }
#pragma unroll
  for (int u = 0; u < kCols; ++u) out[u] = dev::butterfly_lane0<kGroups>(lanes[u]);
}

/// route_partials for one column.
template <int kRank>
CAKEMOE_DEVICE float route_partial(const float* row, const float (&b)[kRank]) {
  float out[1];
  route_partials<kRank, 1>(row, reinterpret_cast<const float(&)[1][kRank]>(b), out);
  return out[0];
}

/// Two columns of an expand block, lc and lc + `col1_offset`, for `n` routes (expand_cols 2):
/// both B rows unpacked from `stage` (grouped_expand_slot order; the second column's slots are
/// in bounds even past the block's last column), then per route both partials from one read of
/// the shrink row; the second is stored only if `second`. `c`: lc's column in H.
template <bool kBf16, int kRank>
CAKEMOE_DEVICE void expand_two_columns(const GroupedParams& p, const uint4* stage, int lc,
                                       int col1_offset, bool second, const float (*rows)[kRank],
                                       const int* pairs, int n, int64_t c, uint64_t policy) {
  constexpr int kGroups = kRank / 8;
  float b[2][kRank];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    dev::unpack8<!kBf16>(stage[grouped_expand_slot<kGroups>(lc, g)], b[0] + 8 * g);
    dev::unpack8<!kBf16>(stage[grouped_expand_slot<kGroups>(lc + col1_offset, g)], b[1] + 8 * g);
  }
  const auto route = [&](int i) {
    float out[2];
    route_partials<kRank, 2>(rows[i], b, out);
    float* dst = p.partials + static_cast<int64_t>(pairs[i]) * p.hidden + c;
    dev::st_global_hint(dst, out[0], policy);
    if (second) dev::st_global_hint(dst + col1_offset, out[1], policy);
  };
  for (int i = 0; i < n; ++i) route(i);
}

/// Threads of a grouped-expand CTA: one per column, or with two columns per thread (kCols 2)
/// one per column pair at ranks <= 32; at rank 64 a column pair is shared by a thread pair
/// (expand_pair_partial), so again one thread per column.
constexpr int grouped_expand_threads(int rank, int cols) {
  return cols == 2 && rank <= 32 ? kGroupExpandCols / 2 : kGroupExpandCols;
}

/// Rank group of entry q (0..3) of half h's list {2h, 2h + 1, 2h + 4, 2h + 5}
/// (expand_pair_partial).
CAKEMOE_HD constexpr int pair_rank_group(int h, int q) { return 2 * h + (q & 1) + (q >> 1) * 4; }

/// Half h's B values of a rank-64 column pair for expand_pair_partial: b[u][8 q ..] = rank group
/// pair_rank_group(h, q) of column `col[u]`, unpacked from `stage` (grouped_expand_slot order).
template <bool kBf16>
CAKEMOE_DEVICE void unpack_pair_b(const uint4* stage, const int (&col)[2], int h,
                                  float (&b)[2][32]) {
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      dev::unpack8<!kBf16>(stage[grouped_expand_slot<8>(col[u], pair_rank_group(h, q))],
                           b[u] + 8 * q);
    }
  }
}

/// Rank 64, two columns per thread pair (lanes 2m, 2m + 1): half h keeps rank groups
/// {2h, 2h + 1, 2h + 4, 2h + 5} of both columns (b[u][q], q the group's index in that list), so
/// dev::butterfly_lane0's first level (g + g ^ 4) is local; its second level crosses the pair
/// with one shfl.xor of two values per route, and each thread finishes column h of the pair.
/// Per column the groups' chains and the butterfly tree are route_partial's, so are the bits.
/// `mask`: the warp's lanes that call it (whole pairs).
CAKEMOE_DEVICE float expand_pair_partial(const float* row, const float (&b)[2][32], int h,
                                         unsigned mask) {
  // Level 1 per column u: w[u][0] = v(2h) + v(2h + 4), w[u][1] = v(2h + 1) + v(2h + 5).
  float w[2][2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int g = pair_rank_group(h, q);
      float part = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) part = fmaf(row[8 * g + e], b[u][8 * q + e], part);
      v[q] = part;
    }
    w[u][0] = v[0] + v[2];
    w[u][1] = v[1] + v[3];
  }
  // Half 0 finishes column 0 and needs half 1's level-1 values of it; half 1 the reverse.
  // NOTE: selects, not w[1 - h][.] (a runtime index puts w in local memory).
  const float send0 = h == 0 ? w[1][0] : w[0][0], send1 = h == 0 ? w[1][1] : w[0][1];
  const float got0 = __shfl_xor_sync(mask, send0, 1), got1 = __shfl_xor_sync(mask, send1, 1);
  // Level 2: v0 + v2 and v1 + v3 of the column (v0, v1 from half 0; v2, v3 from half 1).
  const float x0 = h == 0 ? w[0][0] + got0 : got0 + w[1][0];
  const float x1 = h == 0 ? w[0][1] + got1 : got1 + w[1][1];
  return x0 + x1;
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
/// branches cost ~35 moves per k tile, and the shrink is issue-bound: H200, session 17, grouped
/// rows 0.98). `stage_tid`: this thread's first staged vector (kStage >= 1); `part0`: the tile's
/// first part (its A copies are still landing; kStage 2 also staged its x rows).
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

/// grid (max_tiles, R / 8) x 128: the shrink rows of one tile (<= 16 routes of one bin) for 8
/// rank rows, in parts of 4 routes (32 accumulators per thread). kStage 1: the 8 x H block of A is
/// copied into dynamic shared memory once and every part reads it there; kStage 2: also the x
/// rows of the first part. The copy is thread-private (each thread copies the 16-byte vectors it
/// later reads: vector k-tile t, lane tid) and committed one group per k tile, so tile 0's
/// arithmetic runs while later tiles are in flight, with no barrier. kStage 0: parts after the
/// first re-read A through L1/L2. The arithmetic is the same in every form.
template <bool kBf16, int kStage>
// NOTE: stage 2's shared memory allows 3 CTAs per SM, so its bound lets ptxas use up to 170
// registers instead of spilling at 128; stage 1 (49 KB at H 3072) fits 4, which its 128
// registers keep (ptxas: 125-128, no spill), stage 0 has no shared memory and needs ~150.
__global__ void __launch_bounds__(kShrinkThreads, kStage == 1 ? 4 : 3)
    grouped_shrink_kernel(GroupedParams p) {
  extern __shared__ uint4 stage_vec[];
  __shared__ SplitSums red;
  // Timeline builds: slot 1 + CTA of timeline_front (slot 0 is the index): 0 entry, 2 wait
  // returned, 4 exit of a CTA with a tile.
  const unsigned long long slot = 1 + dev::timeline_cta();
  dev::timeline_stamp_at(p.timeline_front, slot, 0);
  dev::pdl_wait();  // the index is complete
  dev::pdl_trigger();
  dev::timeline_stamp_at(p.timeline_front, slot, 2);
  const GroupedWs w = grouped_ws(p);
  // Tile-major grids (GroupedParams::shrink_tile_major) run a tile's rank blocks side by side.
  const int rank_blocks = p.rank / kRankTile;
  const int tile = p.shrink_tile_major ? static_cast<int>(blockIdx.x) / rank_blocks
                                       : static_cast<int>(blockIdx.x);
  const int rank_block = p.shrink_tile_major ? static_cast<int>(blockIdx.x) % rank_blocks
                                             : static_cast<int>(blockIdx.y);
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
    const uint64_t a_policy = read_once_policy(p);
    for (int t = 0; t < tiles; ++t) {
      const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
      if (k0 < h) {  // H % 8 == 0: a vector is wholly inside or outside
        uint4* dst = stage_vec + static_cast<int64_t>(t) * kRows * kShrinkThreads + tid;
#pragma unroll
        for (int r = 0; r < kRankTile; ++r) {
          dev::cp_async16_hint(dst + r * kShrinkThreads, a_global + r * h + k0, a_policy);
        }
        if constexpr (kStage == 2) {
          for (int i = 0; i < first_part; ++i) {
            dev::cp_async16(dst + (kRankTile + i) * kShrinkThreads, x_first[i] + k0, true);
          }
        }
      }
      dev::cp_async_commit();
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
  dev::timeline_stamp_at(p.timeline_front, slot, 4);
}

/// grid (ceil(max_tiles / kTiles), ceil(H / 256)) x 256: one column per thread over kTiles
/// consecutive tiles. Right after reading the tile table the CTA copies every tile's B block
/// (256 columns x R, contiguous in global memory) into shared memory with coalesced cp.async,
/// so kTiles x 16 KB (rank 32) are in flight per trip; the rows come from tile_rows in one
/// contiguous trip.
///
/// Before griddepcontrol.wait: the tile table, the pair ids and the B copies. The index wrote
/// the table and sorted_routes, and the index grid completed before the shrink's wait returned,
/// which precedes this grid's launch (the shrink triggers only after its wait), so ld.global.cg
/// finds them in L2 (the combine reads its route lists the same way). B is an input. Only
/// tile_rows, the shrink's output, needs the wait; the copies of CTAs that start during the
/// shrink's last wave overlap it.
/// kCols 2 (ranks <= 32, GroupedParams::expand_cols): 128 threads, thread t owns columns t and
/// t + 128 of the block, so each shrink-row value read from shared memory feeds two FMA chains;
/// per column the arithmetic (and the bits) are kCols 1's.
template <bool kBf16, int kRank, int kTiles, int kCols = 1>
// NOTE: ranks <= 32 keep 4 CTAs per SM (<= 64 registers; 2 tiles at rank 32 asked for 66); two
// columns per thread (128-thread CTAs, 2 R fp32 of B) keep 6 (ptxas: 72-80 registers, no
// spill; 36 KB of shared memory each at rank 32), and 8 at ranks <= 16 (64 registers, no spill;
// rank 32 would spill 64 bytes at 7).
// Rank 64 with thread pairs (kCols 2): 256 threads at <= 80 registers, 3 CTAs per SM (72 KB of
// shared memory each) instead of 2 at 126.
__global__ void __launch_bounds__(grouped_expand_threads(kRank, kCols),
                                  kCols == 2 ? (kRank <= 16 ? 8 : (kRank <= 32 ? 6 : 3))
                                             : (kRank <= 32 ? 4 : 2))
    grouped_expand_kernel(GroupedParams p) {
  static_assert(kCols == 1 || (kCols == 2 && (kRank <= 32 || kRank == 64)),
                "two columns per thread (rank <= 32) or per thread pair (rank 64)");
  constexpr int kThreads = grouped_expand_threads(kRank, kCols);
  extern __shared__ uint4 bstage[];  // [kTiles][256 * kRank / 8], grouped_expand_slot order
  __shared__ float srow[kTiles][kGroupTileRoutes][kRank];
  __shared__ int spair[kTiles][kGroupTileRoutes];
  constexpr int kGroups = kRank / 8;
  constexpr int kTileVectors = kGroupExpandCols * kGroups;
  // Timeline builds: 0 entry, 1 pre-wait reads and copies issued, 2 wait returned, 3 rows
  // staged, 4 exit of a CTA with a tile.
  dev::timeline_stamp(p.timeline_back, 0);
  const GroupedWs w = grouped_ws(p);
  const int tile0 = static_cast<int>(blockIdx.x) * kTiles;
  // NOTE: the tile count and the tiles in one trip (reads past the count, up to max_tiles, are
  // in bounds and discarded).
  int4 info[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    info[j] = tile0 + j < p.max_tiles ? __ldcg(w.tile_info + tile0 + j) : make_int4(0, 0, 0, 0);
  }
  const int ntiles = __ldcg(w.header);
  if (tile0 >= ntiles) {
    // NOTE: still waits, so this grid completes only after the shrink (the combine's
    // reasoning about what precedes its launch needs every expand CTA past its wait).
    dev::pdl_wait();
    dev::pdl_trigger();
    return;
  }
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    if (tile0 + j >= ntiles) info[j] = make_int4(0, 0, 0, 0);
  }
  const int tid = threadIdx.x;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kGroupExpandCols;
  const int cols = static_cast<int>(min(static_cast<int64_t>(kGroupExpandCols), p.hidden - col0));
  const uint64_t b_policy = read_once_policy(p);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    if (info[j].y == 0) continue;
    const uint4* block =
        reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.lora_b) +
                                       (static_cast<int64_t>(info[j].z) * p.hidden + col0) * kRank);
    for (int q = tid; q < cols * kGroups; q += kThreads) {
      dev::cp_async16_hint(
          bstage + j * kTileVectors + grouped_expand_slot<kGroups>(q / kGroups, q % kGroups),
          block + q, b_policy);
    }
  }
  dev::cp_async_commit();
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    if (tid < info[j].y) spair[j][tid] = route_pair(p, __ldcg(w.sorted_routes + info[j].x + tid));
  }
  dev::timeline_stamp(p.timeline_back, 1);
  dev::pdl_wait();
  dev::pdl_trigger();
  dev::timeline_stamp(p.timeline_back, 2);
  // One trip: the shrink wrote each tile's rows contiguously (tile_rows, sorted-route order).
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int n = info[j].y;
    const uint16_t* rows = w.tile_rows + static_cast<int64_t>(info[j].x) * kRank;
    for (int idx = tid; idx < n * kRank; idx += blockDim.x) {
      srow[j][idx / kRank][idx % kRank] = widen<kBf16>(rows[idx]);
    }
  }
  dev::cp_async_wait<0>();
  __syncthreads();
  dev::timeline_stamp(p.timeline_back, 3);
  // The rank-64 pair path's shuffle mask, taken while every lane is here (a ballot: ptxas keeps
  // the shuffles plain, where a computed prefix mask made it emit a collective sequence).
  // NOTE: cols is even (H % 8 == 0), so a thread pair is wholly inside or outside the block.
  unsigned live = 0xFFFFFFFFu;
  if constexpr (kCols == 2 && kRank == 64) live = __ballot_sync(0xFFFFFFFFu, tid < cols);
  if (tid >= cols) return;
  const int64_t c = col0 + tid;
  // The combine reads the partials next: kept in L2 (evict-last) where they fit.
  const uint64_t partial_policy = read_again_policy(p);
  if constexpr (kCols == 2 && kRank == 64) {
    const int h = tid & 1, pair[2] = {tid & ~1, tid | 1};  // this pair's columns
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int n = info[j].y;
      if (n == 0) continue;
      float b[2][32];
      unpack_pair_b<kBf16>(bstage + j * kTileVectors, pair, h, b);
      for (int i = 0; i < n; ++i) {
        dev::st_global_hint(p.partials + static_cast<int64_t>(spair[j][i]) * p.hidden + c,
                            expand_pair_partial(srow[j][i], b, h, live), partial_policy);
      }
    }
  } else if constexpr (kCols == 2) {
    // NOTE: column tid + 128 may be past the block's last column (a partial block): its B slot
    // is read (in bounds, stale) and its partial not stored.
    const bool second = tid + kThreads < cols;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      if (info[j].y == 0) continue;
      expand_two_columns<kBf16, kRank>(p, bstage + j * kTileVectors, tid, kThreads, second, srow[j],
                                       spair[j], info[j].y, c, partial_policy);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int n = info[j].y;
      if (n == 0) continue;
      float b[kRank];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        dev::unpack8<!kBf16>(bstage[j * kTileVectors + grouped_expand_slot<kGroups>(tid, g)],
                             b + 8 * g);
      }
      const auto route = [&](int i) {
        dev::st_global_hint(p.partials + static_cast<int64_t>(spair[j][i]) * p.hidden + c,
                            route_partial<kRank>(srow[j][i], b), partial_policy);
      };
      if constexpr (kRank <= 16) {
        // NOTE: unrolled by 2 the route loop fits 64 registers without spilling at ranks 8/16.
#pragma unroll 2
        for (int i = 0; i < n; ++i) route(i);
      } else {
        for (int i = 0; i < n; ++i) route(i);
      }
    }
  }
  dev::timeline_stamp(p.timeline_back, 4);
}

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
    dev::pdl_wait();
    // The partials are dead after this read: evict-first, and with discard_partials each line
    // is dropped from L2 once the warp has read it (no write-back to HBM).
    const uint64_t read_policy = read_once_policy(p);
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
            const float4 v =
                dev::ld_global_hint(reinterpret_cast<const float4*>(src + c), read_policy);
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
              if (c < h) dev::discard_l2_line(p.partials + list[j] * h + c);
            }
          }
        }
      }
    }
    return;
  }
  dev::pdl_wait();
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
