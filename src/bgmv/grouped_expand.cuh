// Grouped expand on SIMT cores (spec bgmv §5; ranks 8 and 16, grouped_tensor_core_expand()): B
// rows read once per tile of <= 16 routes, unweighted per-route partials in the grouped order of
// docs/decisions/bgmv.md (bitwise the CPU engine's).
#pragma once

#include <cstdint>

#include "bgmv/grouped_index.cuh"
#include "ptx/cache_hints.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/sync.cuh"

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

/// Two columns of an expand block, lc and lc + `col1_offset`, for `n` routes:
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
    ptx::st_global_l2_hint_f32(dst, out[0], policy);
    if (second) ptx::st_global_l2_hint_f32(dst + col1_offset, out[1], policy);
  };
  for (int i = 0; i < n; ++i) route(i);
}

/// Threads of a grouped-expand CTA: one per column pair (kGroupExpandThreadCols).
constexpr int kGroupExpandThreads = kGroupExpandCols / kGroupExpandThreadCols;

/// grid (ceil(max_tiles / kTiles), ceil(H / 256)) x 128, kTiles = kGroupExpandTiles: two columns
/// per thread (t and t + 128 of the block) over kTiles consecutive tiles, so each shrink-row value
/// read from shared memory feeds two FMA chains. Right after reading the tile table the CTA copies
/// every tile's B block (256 columns x R, contiguous in global memory) into shared memory with
/// coalesced cp.async, so kTiles x 8 KB (rank 16) are in flight per trip; the rows come from
/// tile_rows in one contiguous trip.
///
/// Before griddepcontrol.wait: the tile table, the pair ids and the B copies. The index wrote
/// the table and sorted_routes, and the index grid completed before the shrink's wait returned,
/// which precedes this grid's launch (the shrink triggers only after its wait), so ld.global.cg
/// finds them in L2 (the combine reads its route lists the same way). B is an input. Only
/// tile_rows, the shrink's output, needs the wait; the copies of CTAs that start during the
/// shrink's last wave overlap it.
template <bool kBf16, int kRank>
// NOTE: 8 CTAs per SM (64 registers, no spill; 2 R fp32 of B per thread).
__global__ void __launch_bounds__(kGroupExpandThreads, 8) grouped_expand_kernel(GroupedParams p) {
  static_assert(kRank == 8 || kRank == 16, "ranks 32 and 64 expand on tensor cores");
  constexpr int kTiles = kGroupExpandTiles;
  constexpr int kThreads = kGroupExpandThreads;
  extern __shared__ uint4 bstage[];  // [kTiles][256 * kRank / 8], grouped_expand_slot order
  __shared__ float srow[kTiles][kGroupTileRoutes][kRank];
  __shared__ int spair[kTiles][kGroupTileRoutes];
  constexpr int kGroups = kRank / 8;
  constexpr int kTileVectors = kGroupExpandCols * kGroups;
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
    ptx::griddep_wait();
    ptx::griddep_launch_dependents();
    return;
  }
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    if (tile0 + j >= ntiles) info[j] = make_int4(0, 0, 0, 0);
  }
  const int tid = threadIdx.x;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kGroupExpandCols;
  const int cols = static_cast<int>(min(static_cast<int64_t>(kGroupExpandCols), p.hidden - col0));
  const uint64_t b_policy = read_once_policy();
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    if (info[j].y == 0) continue;
    const uint4* block =
        reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.lora_b) +
                                       (static_cast<int64_t>(info[j].z) * p.hidden + col0) * kRank);
    for (int q = tid; q < cols * kGroups; q += kThreads) {
      ptx::cp_async_16_l2_hint(
          bstage + j * kTileVectors + grouped_expand_slot<kGroups>(q / kGroups, q % kGroups),
          block + q, b_policy);
    }
  }
  ptx::cp_async_commit();
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    if (tid < info[j].y) spair[j][tid] = route_pair(p, __ldcg(w.sorted_routes + info[j].x + tid));
  }
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();
  // One trip: the shrink wrote each tile's rows contiguously (tile_rows, sorted-route order).
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int n = info[j].y;
    const uint16_t* rows = w.tile_rows + static_cast<int64_t>(info[j].x) * kRank;
    for (int idx = tid; idx < n * kRank; idx += blockDim.x) {
      srow[j][idx / kRank][idx % kRank] = widen<kBf16>(rows[idx]);
    }
  }
  ptx::cp_async_wait<0>();
  __syncthreads();
  if (tid >= cols) return;
  const int64_t c = col0 + tid;
  // The combine reads the partials next: kept in L2 (evict-last) where they fit.
  const uint64_t partial_policy = read_again_policy();
  // NOTE: column tid + 128 may be past the block's last column (a partial block): its B slot is
  // read (in bounds, stale) and its partial not stored.
  const bool second = tid + kThreads < cols;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    if (info[j].y == 0) continue;
    expand_two_columns<kBf16, kRank>(p, bstage + j * kTileVectors, tid, kThreads, second, srow[j],
                                     spair[j], info[j].y, c, partial_policy);
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
