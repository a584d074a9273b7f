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

/// One part of n <= 4 routes (x rows at xs[0 .. n)) against the staged block: grouped_shrink_
/// kernel's shrink_part (its stage-1 layout). `wait_a`: wait for each k tile's cp.async group
/// first (the first part after stage_a_block, with nothing committed after it). Returns the
/// part's total for thread i * 8 + r < 8 n (every thread calls it: add_split_sums has barriers).
template <bool kBf16>
CAKEMOE_DEVICE float shrink_staged_part(const GroupedParams& p, const uint4* stage, int n,
                                        const uint16_t* const (&xs)[kGroupShrinkPart], bool wait_a,
                                        SplitSums& red) {
  const int ktiles = static_cast<int>((p.hidden + kShrinkTileK - 1) / kShrinkTileK);
  const int tiles_per_split = (ktiles + p.splits - 1) / p.splits;
  return shrink_part_n<kBf16, 1>(n, p, stage + threadIdx.x, nullptr, xs, wait_a, ktiles,
                                 tiles_per_split, red);
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
