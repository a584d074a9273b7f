// Persistent form of the grouped shrink (stage 3; spec bgmv §5,
// docs/decisions/bgmv-gpu-runtime.md): a few CTAs per SM walk (tile, rank block) items and stream
// their A and x vectors through a ring of k-tile slots, so the next item's loads are in flight
// while this one computes and reduces. Same arithmetic as grouped_shrink_kernel (parts of 4 routes,
// per-thread k-tile order, butterflies, splits): the rows are bitwise equal.
#pragma once

#include <cstdint>

#include "bgmv/grouped_compute.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

constexpr int kRingSlots = 3;
constexpr int kRingRows = kRankTile + kGroupShrinkPart;  // A's 8 vectors, then x's 4, per thread

/// Bytes of dynamic shared memory of the ring kernel (independent of H).
constexpr int64_t kRingSmemBytes =
    int64_t{kRingSlots} * kRingRows * kShrinkThreads * static_cast<int64_t>(sizeof(uint4));

/// What one ring slot holds for the consumer (the producer's view of the step it staged).
struct RingStep {
  int pos;         ///< sorted position of the part's first route
  int n;           ///< routes of the part (1..4); 0: no more work for this CTA
  int t;           ///< k tile
  int rank_block;  ///< rank rows 8 * rank_block ..
};

/// Walks this CTA's steps (item, part, k tile) in order; item = blockIdx.x + j * gridDim.x over
/// header[0] * (R / 8) items, item = tile * (R / 8) + rank block (neighbours share x rows).
struct RingCursor {
  int item, part, t;
  int first, routes, bin;
  CAKEMOE_DEVICE void load_item(const GroupedWs& w, int items, int rank_blocks) {
    routes = 0;
    if (item < items) {
      const int4 info = w.tile_info[item / rank_blocks];
      first = info.x;
      routes = info.y;
      bin = info.z;
    }
  }
  CAKEMOE_DEVICE void advance(const GroupedWs& w, int items, int rank_blocks, int tiles) {
    if (++t < tiles) return;
    t = 0;
    if ((++part) * kGroupShrinkPart < routes) return;
    part = 0;
    item += gridDim.x;
    load_item(w, items, rank_blocks);
  }
};

/// grid min(items, CTAs that fit) x 128, dynamic smem kRingSmemBytes.
template <bool kBf16>
__global__ void __launch_bounds__(kShrinkThreads) grouped_shrink_ring_kernel(GroupedParams p) {
  extern __shared__ uint4 ring[];
  __shared__ SplitSums red;
  dev::pdl_wait();  // the index is complete
  dev::pdl_trigger();
  const GroupedWs w = grouped_ws(p);
  const int rank_blocks = p.rank / kRankTile;
  const int items = w.header[0] * rank_blocks;
  if (static_cast<int>(blockIdx.x) >= items) return;
  const int tid = threadIdx.x;
  const int64_t h = p.hidden;
  const int tiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const int tiles_per_split = (tiles + p.splits - 1) / p.splits;
  const uint16_t* x = static_cast<const uint16_t*>(p.x);
  const uint16_t* lora_a = static_cast<const uint16_t*>(p.lora_a);

  // Producer: stages step `cur` into `slot` (this thread's vectors only) and returns what it
  // staged; one commit group per step, empty past the end, so wait_group counts stay exact.
  RingCursor cur{static_cast<int>(blockIdx.x), 0, 0, 0, 0, 0};
  cur.load_item(w, items, rank_blocks);
  const uint16_t* xrow[kGroupShrinkPart] = {};
  const auto stage = [&](int slot) -> RingStep {
    RingStep step{0, 0, 0, 0};
    if (cur.routes > 0) {
      const int pos = cur.first + cur.part * kGroupShrinkPart;
      const int n = min(kGroupShrinkPart, cur.routes - cur.part * kGroupShrinkPart);
      if (cur.t == 0) {
#pragma unroll
        for (int i = 0; i < kGroupShrinkPart; ++i) {
          xrow[i] = x + p.sorted_token_ids[w.sorted_routes[pos + min(i, n - 1)]] * h;
        }
      }
      const int64_t k0 = static_cast<int64_t>(cur.t) * kShrinkTileK + 8 * tid;
      if (k0 < h) {  // H % 8 == 0: a vector is wholly inside or outside
        uint4* dst = ring + slot * kRingRows * kShrinkThreads + tid;
        const uint16_t* a =
            lora_a +
            (static_cast<int64_t>(cur.bin) * p.rank + (cur.item % rank_blocks) * kRankTile) * h +
            k0;
#pragma unroll
        for (int r = 0; r < kRankTile; ++r)
          dev::cp_async16(dst + r * kShrinkThreads, a + r * h, true);
#pragma unroll
        for (int i = 0; i < kGroupShrinkPart; ++i) {
          if (i < n) dev::cp_async16(dst + (kRankTile + i) * kShrinkThreads, xrow[i] + k0, true);
        }
      }
      step = RingStep{pos, n, cur.t, cur.item % rank_blocks};
      cur.advance(w, items, rank_blocks, tiles);
    }
    dev::cp_async_commit();
    return step;
  };

  // Consumer state: the canonical accumulation of spec §3.2 per (route, rank row).
  float acc[kGroupShrinkPart][kRankTile];
  float total = 0.0f;  // owned by thread i * 8 + r < 32
  int split = 0;
  const auto clear = [&]() {
#pragma unroll
    for (int i = 0; i < kGroupShrinkPart; ++i) {
#pragma unroll
      for (int r = 0; r < kRankTile; ++r) acc[i][r] = 0.0f;
    }
  };
  // One step: arithmetic on the staged vectors, the split's reduction after its last tile, the
  // part's rows after the last tile. Returns false at the end of the CTA's work.
  const auto consume = [&](int slot, const RingStep& step) -> bool {
    if (step.n == 0) return false;
    const int n = step.n;
    if (step.t == 0) {
      clear();
      total = 0.0f;
      split = 0;
    }
    const int64_t k0 = static_cast<int64_t>(step.t) * kShrinkTileK + 8 * tid;
    if (k0 < h) {
      const uint4* src = ring + slot * kRingRows * kShrinkThreads + tid;
      shrink_tile_n(
          n,
          [&](int i, float* out) {
            dev::unpack8<!kBf16>(src[(kRankTile + i) * kShrinkThreads], out);
          },
          [&](int r, float* out) { dev::unpack8<!kBf16>(src[r * kShrinkThreads], out); }, acc);
    }
    const int split_end = min((split + 1) * tiles_per_split, tiles);
    if (step.t + 1 == split_end) {
      add_split_sums(n, acc, red, &total);
      clear();
      // Splits past the last tile reduce nothing: each adds the 0.0f its empty sum gives.
      for (++split; split < p.splits && split * tiles_per_split >= tiles; ++split) {
        total = total + 0.0f;
      }
    }
    if (step.t + 1 == tiles) store_part_rows<kBf16>(p, w, step.pos, n, step.rank_block, total);
    return true;
  };

  // Slots are compile-time in the unrolled loop, so the staged steps stay in registers.
  RingStep staged[kRingSlots];
  staged[0] = stage(0);
  staged[1] = stage(1);
  for (;;) {
    staged[2] = stage(2);
    dev::cp_async_wait<kRingSlots - 1>();
    if (!consume(0, staged[0])) break;
    staged[0] = stage(0);
    dev::cp_async_wait<kRingSlots - 1>();
    if (!consume(1, staged[1])) break;
    staged[1] = stage(1);
    dev::cp_async_wait<kRingSlots - 1>();
    if (!consume(2, staged[2])) break;
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
