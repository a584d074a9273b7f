// Fused grouped shrink + expand (stage 4; spec bgmv §5, docs/decisions/bgmv-gpu-runtime.md): one
// CTA per tile (<= 16 routes of one bin) computes the tile's shrink rows for every rank block,
// keeps them in shared memory, then computes the tile's per-route partials over all H columns.
// The rows never go to HBM and back (no tile_rows), there is no grid boundary between the two
// stages, and B's first column chunks are in flight while the last rank blocks compute: A's k
// tiles and B's column chunks stream through one ring of 16 KB slots in a fixed item order.
//
// Same arithmetic as grouped_shrink_kernel (parts of 4 routes, per-thread k-tile order, warp
// reduce-scatter, splits) and grouped_expand_kernel (per-group FMA chains, butterfly lane 0):
// the shrink rows and the partials are bitwise equal, so the combine's y is too.
#pragma once

#include <cstdint>

#include "bgmv/grouped_compute.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

constexpr int kFusedSlotVectors = kGroupFusedSlotBytes / 16;
static_assert(kFusedSlotVectors == kRankTile * kShrinkThreads, "an A slot is 8 rows x 128 vectors");

/// grid max_tiles x 128, dynamic smem grouped_fused_smem_bytes(p.ring_slots).
///
/// Ring items, in order: A's rank block rb, k tile t (item rb * K + t; 8 rows x 128 vectors,
/// each thread copies the vectors it later reads: no barrier between its copy and its reads),
/// then B's column chunks j (item R / 8 * K + j; 16 KB of B[bin] contiguous, copied coalesced by
/// all threads into grouped_expand_slot order, read after a barrier). Item i lives in slot
/// i % S and is issued once item i - S has been consumed; a rank block's k tiles are consumed
/// together (every part reads all of them), so S >= K.
template <bool kBf16, int kRank>
__global__ void __launch_bounds__(kShrinkThreads, 2) grouped_fused_kernel(GroupedParams p) {
  extern __shared__ uint4 ring[];
  __shared__ SplitSums red;
  __shared__ float srow[kGroupTileRoutes][kRank];
  __shared__ int spair[kGroupTileRoutes];
  constexpr int kGroups = kRank / 8;
  constexpr int kRankBlocks = kRank / kRankTile;
  constexpr int kChunkCols = kFusedSlotVectors / kGroups;  // B columns per slot
  constexpr int kColsPerThread = kChunkCols / kShrinkThreads;
  dev::pdl_wait();  // the index is complete
  dev::pdl_trigger();
  const GroupedWs w = grouped_ws(p);
  if (static_cast<int>(blockIdx.x) >= w.header[0]) return;
  const int4 info = w.tile_info[blockIdx.x];
  const int first = info.x, routes = info.y, bin = info.z;
  const int tid = threadIdx.x;
  const int64_t h = p.hidden;
  const int ktiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const int slots = p.ring_slots;
  const int a_items = kRankBlocks * ktiles;
  const int items = a_items + static_cast<int>((h + kChunkCols - 1) / kChunkCols);
  const uint16_t* a_bin = static_cast<const uint16_t*>(p.lora_a) + static_cast<int64_t>(bin) * kRank * h;
  const uint16_t* b_bin = static_cast<const uint16_t*>(p.lora_b) + static_cast<int64_t>(bin) * h * kRank;
  // One commit group per item (an empty one past the last), so "item i landed" is "at most
  // issued - i - 1 groups pending".
  int issued = 0;
  const auto issue_next = [&]() {
    const int i = issued++;
    uint4* slot = ring + (i % slots) * kFusedSlotVectors;
    if (i < a_items) {
      const int rb = i / ktiles, t = i % ktiles;
      const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
      if (k0 < h) {  // H % 8 == 0: a vector is wholly inside or outside
        const uint16_t* src = a_bin + static_cast<int64_t>(rb) * kRankTile * h + k0;
#pragma unroll
        for (int r = 0; r < kRankTile; ++r) {
          dev::cp_async16(slot + r * kShrinkThreads + tid, src + r * h, true);
        }
      }
    } else if (i < items) {
      const int64_t col0 = static_cast<int64_t>(i - a_items) * kChunkCols;
      const int cols = static_cast<int>(min(static_cast<int64_t>(kChunkCols), h - col0));
      const uint4* src = reinterpret_cast<const uint4*>(b_bin + col0 * kRank);
      for (int q = tid; q < cols * kGroups; q += kShrinkThreads) {
        dev::cp_async16(slot + grouped_expand_slot<kGroups>(q / kGroups, q % kGroups), src + q,
                        true);
      }
    }
    dev::cp_async_commit();
  };
  for (int i = 0; i < slots; ++i) issue_next();
  if (tid < routes) spair[tid] = w.sorted_routes[first + tid];

  // ---- shrink: rank block by rank block, parts of 4 routes (grouped_shrink_kernel's order) ----
  const int tiles_per_split = (ktiles + p.splits - 1) / p.splits;
  for (int rb = 0; rb < kRankBlocks; ++rb) {
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
        const auto fetch_x = [&](int t) {
          const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
          if (k0 >= h) return;
#pragma unroll
          for (int i = 0; i < kGroupShrinkPart; ++i) {
            if (i < n) x_next[i] = *reinterpret_cast<const uint4*>(xs[i] + k0);
          }
        };
        if (t0 < t1) fetch_x(t0);
        for (int t = t0; t < t1; ++t) {
          const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
          if (k0 >= h) continue;  // only in the last k tile: nothing to fetch after it
          const int item = rb * ktiles + t;
          if (part == 0) cp_async_wait_upto(issued - item - 1);
          const uint4* staged = ring + (item % slots) * kFusedSlotVectors + tid;
          uint4 x_now[kGroupShrinkPart];
#pragma unroll
          for (int i = 0; i < kGroupShrinkPart; ++i) x_now[i] = x_next[i];
          if (t + 1 < t1) fetch_x(t + 1);
          const auto load_x = [&](int i, float* out) { dev::unpack8<!kBf16>(x_now[i], out); };
          const auto load_a = [&](int r, float* out) {
            dev::unpack8<!kBf16>(staged[r * kShrinkThreads], out);
          };
          shrink_tile_n(n, load_x, load_a, acc);
        }
        add_split_sums(n, acc, red, &total);
      }
      if (tid < n * kRankTile) {
        const int i = tid / kRankTile, r = tid % kRankTile;
        const uint16_t bits = narrow<kBf16>(total);
        const int column = rb * kRankTile + r;
        static_cast<uint16_t*>(p.shrink_out)[static_cast<int64_t>(spair[part + i]) * kRank +
                                             column] = bits;
        srow[part + i][column] = widen<kBf16>(bits);
      }
    }
    // add_split_sums ended with a barrier after every thread's last read of this rank block's
    // slots: refill them (the next rank blocks' k tiles, then B's chunks).
    while (issued < (rb + 1) * ktiles + slots) issue_next();
  }
  __syncthreads();  // every route's rows in srow

  // ---- expand: B's column chunks, one column per thread per 128 (grouped_expand_kernel's
  // per-route arithmetic) ----
  for (int item = a_items; item < items; ++item) {
    cp_async_wait_upto(issued - item - 1);
    __syncthreads();  // every thread's copies of this chunk have landed
    const uint4* slot = ring + (item % slots) * kFusedSlotVectors;
    const int64_t col0 = static_cast<int64_t>(item - a_items) * kChunkCols;
#pragma unroll 1
    for (int m = 0; m < kColsPerThread; ++m) {
      const int lc = tid + m * kShrinkThreads;
      const int64_t c = col0 + lc;
      if (c >= h) break;
      float b[kRank];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        dev::unpack8<!kBf16>(slot[grouped_expand_slot<kGroups>(lc, g)], b + 8 * g);
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
    __syncthreads();  // every thread is done with the slot
    issue_next();
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
