// The shrink half of the fused grouped stage (grouped_fused.cuh), kept apart from its cluster and
// expand code: A's 8 x H rank block staged in shared memory with grouped_shrink_kernel's stage-1
// layout, and one part's rows in its canonical per-route order (spec bgmv §3.2).
#pragma once

#include <cstdint>

#include "bgmv/grouped_compute.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// Copies A's rank block (8 rows from `a_rows`, row stride H) into `stage`, thread-private:
/// vector (row r, k tile t) of this thread at stage[(t * 8 + r) * 128 + tid], one cp.async group
/// per k tile (so part 0 can start on tile 0 while later tiles land).
CAKEMOE_DEVICE void stage_a_block(const GroupedParams& p, const uint16_t* a_rows, uint4* stage) {
  const int tid = threadIdx.x;
  const int64_t h = p.hidden;
  const int ktiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const uint64_t a_policy = read_once_policy(p);
  for (int t = 0; t < ktiles; ++t) {
    const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
    if (k0 < h) {  // H % 8 == 0: a vector is wholly inside or outside
#pragma unroll
      for (int r = 0; r < kRankTile; ++r) {
        dev::cp_async16_hint(stage + (t * kRankTile + r) * kShrinkThreads + tid,
                             a_rows + r * h + k0, a_policy);
      }
    }
    dev::cp_async_commit();
  }
}

/// One part of n <= 4 routes (x rows at xs[0 .. n)) against the staged block: the split loop of
/// grouped_shrink_kernel, x's next k tile loaded before this tile's FMAs. `wait_a`: wait for
/// each k tile's cp.async group first (the first part after stage_a_block, with nothing
/// committed after it). Returns the part's total for thread i * 8 + r < 8 n (every thread
/// calls it: add_split_sums has barriers).
template <bool kBf16>
CAKEMOE_DEVICE float shrink_staged_part(const GroupedParams& p, const uint4* stage, int n,
                                        const uint16_t* const (&xs)[kGroupShrinkPart], bool wait_a,
                                        SplitSums& red) {
  const int tid = threadIdx.x;
  const int64_t h = p.hidden;
  const int ktiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const int tiles_per_split = (ktiles + p.splits - 1) / p.splits;
  float total = 0.0f;
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
    const auto fetch_x = [&](int t) {
      const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
      if (k0 < h) load_x_vectors(xs, n, k0, x_next);
    };
    if (t0 < t1) fetch_x(t0);
    for (int t = t0; t < t1; ++t) {
      const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
      if (k0 >= h) continue;  // only in the last k tile: nothing to fetch after it
      if (wait_a) cp_async_wait_upto(ktiles - 1 - t);  // this k tile's A landed
      uint4 x_now[kGroupShrinkPart];
#pragma unroll
      for (int i = 0; i < kGroupShrinkPart; ++i) x_now[i] = x_next[i];
      if (t + 1 < t1) fetch_x(t + 1);
      const auto load_x = [&](int i, float* out) { dev::unpack8<!kBf16>(x_now[i], out); };
      const auto load_a = [&](int r, float* out) {
        dev::unpack8<!kBf16>(stage[(t * kRankTile + r) * kShrinkThreads + tid], out);
      };
      shrink_tile_n(n, load_x, load_a, acc);
    }
    add_split_sums(n, acc, red, &total);
  }
  return total;
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
