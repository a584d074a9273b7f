// Grouped expand on SIMT cores (spec bgmv §5; ranks 8 / 16 by default, 32 / 64 behind
// CAKEMOE_BGMV_EXPAND_MMA=0): B rows read once per tile of <= 16 routes, unweighted per-route
// partials in the grouped order of docs/decisions/bgmv.md (bitwise the CPU engine's).
#pragma once

#include <cstdint>

#include "bgmv/grouped_index.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

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

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
