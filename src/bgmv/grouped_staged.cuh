// The shrink half of the fused grouped stage (grouped_fused.cuh), kept apart from its cluster and
// expand code: A's 8 x H rank block staged in shared memory with grouped_shrink_kernel's stage-1
// layout (a part's rows then come from shrink_part_n over it, spec bgmv §3.2's order).
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

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
