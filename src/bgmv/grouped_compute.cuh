// Grouped pipeline compute stages (spec bgmv §5): grouped shrink (A rows read once per part of
// 4 routes of one bin, canonical per-route FP32 order of §3.2 -> rows bitwise equal to the
// per-route shrink), grouped expand (B rows read once per tile of <= 16 routes; unweighted
// per-route partials), combine (weights applied per route in ascending pair order; the
// reference::bgmv grouped order, docs/decisions/bgmv.md).
#pragma once

#include <cstdint>

#include "bgmv/grouped_index.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

constexpr int kShrinkThreads = 128;
constexpr int kShrinkTileK = 1024;  // 128 threads x 8 elements
constexpr int kRankTile = 8;

/// grid (max_tiles, R / 8) x 128: the shrink rows of one tile (<= 16 routes of one bin) for 8
/// rank rows, in parts of 4 routes (32 accumulators per thread). kStaged: the 8 x H block of A
/// is copied into dynamic shared memory once (cp.async, all of it in flight) and every part
/// reads it there; otherwise parts after the first re-read A through L1/L2.
template <bool kBf16, bool kStaged>
__global__ void __launch_bounds__(kShrinkThreads) grouped_shrink_kernel(GroupedParams p) {
  extern __shared__ uint4 a_stage_vec[];
  __shared__ float red[4][kGroupShrinkPart][kRankTile];
  dev::pdl_wait();  // the index is complete
  dev::pdl_trigger();
  const GroupedWs w = grouped_ws(p);
  if (static_cast<int>(blockIdx.x) >= w.header[0]) return;
  const int4 info = w.tile_info[blockIdx.x];
  const int first = info.x, routes = info.y, bin = info.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rank_block = blockIdx.y;
  const int64_t h = p.hidden;
  const uint16_t* a_global = static_cast<const uint16_t*>(p.lora_a) +
                             (static_cast<int64_t>(bin) * p.rank + rank_block * kRankTile) * h;
  const uint16_t* a = a_global;
  if constexpr (kStaged) {
    const uint4* src = reinterpret_cast<const uint4*>(a_global);
    const int vectors = static_cast<int>(kRankTile * h / 8);
    for (int v = tid; v < vectors; v += kShrinkThreads) dev::cp_async16(&a_stage_vec[v], src + v, true);
    dev::cp_async_commit();
    dev::cp_async_wait<0>();
    __syncthreads();
    a = reinterpret_cast<const uint16_t*>(a_stage_vec);
  }
  const int tiles = static_cast<int>((h + kShrinkTileK - 1) / kShrinkTileK);
  const int tiles_per_split = (tiles + p.splits - 1) / p.splits;
  for (int part = 0; part < routes; part += kGroupShrinkPart) {
    const int n = min(kGroupShrinkPart, routes - part);
    const uint16_t* xs[kGroupShrinkPart];
    int pairs[kGroupShrinkPart];
#pragma unroll
    for (int i = 0; i < kGroupShrinkPart; ++i) {
      pairs[i] = w.sorted_routes[first + part + min(i, n - 1)];
      xs[i] = static_cast<const uint16_t*>(p.x) + p.sorted_token_ids[pairs[i]] * h;
    }
    float total = 0.0f;  // owned by thread i * 8 + r < 32
    for (int z = 0; z < p.splits; ++z) {
      const int t0 = min(z * tiles_per_split, tiles), t1 = min((z + 1) * tiles_per_split, tiles);
      float acc[kGroupShrinkPart][kRankTile];
#pragma unroll
      for (int i = 0; i < kGroupShrinkPart; ++i) {
#pragma unroll
        for (int r = 0; r < kRankTile; ++r) acc[i][r] = 0.0f;
      }
      for (int t = t0; t < t1; ++t) {
        const int64_t k0 = static_cast<int64_t>(t) * kShrinkTileK + 8 * tid;
        if (k0 >= h) continue;  // H % 8 == 0: a vector is wholly inside or outside
        float av[kRankTile][8];
#pragma unroll
        for (int r = 0; r < kRankTile; ++r) load8<kBf16>(a + r * h + k0, av[r]);
#pragma unroll
        for (int i = 0; i < kGroupShrinkPart; ++i) {
          if (i >= n) break;
          float xv[8];
          load8<kBf16>(xs[i] + k0, xv);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
#pragma unroll
            for (int r = 0; r < kRankTile; ++r) acc[i][r] = fmaf(xv[e], av[r][e], acc[i][r]);
          }
        }
      }
      // Warp XOR butterflies (16 .. 1), then warp sums in warp order from 0.0f (spec §3.2).
#pragma unroll
      for (int i = 0; i < kGroupShrinkPart; ++i) {
#pragma unroll
        for (int r = 0; r < kRankTile; ++r) {
          float v = acc[i][r];
#pragma unroll
          for (int off = 16; off >= 1; off /= 2) v = v + __shfl_xor_sync(0xFFFFFFFFu, v, off);
          if (lane == 0) red[warp][i][r] = v;
        }
      }
      __syncthreads();
      if (tid < kGroupShrinkPart * kRankTile) {
        const int i = tid / kRankTile, r = tid % kRankTile;
        float sum = 0.0f;
        for (int wi = 0; wi < 4; ++wi) sum = sum + red[wi][i][r];
        total = total + sum;
      }
      __syncthreads();
    }
    if (tid < kGroupShrinkPart * kRankTile) {
      const int i = tid / kRankTile, r = tid % kRankTile;
      if (i < n) {
        uint16_t* out = static_cast<uint16_t*>(p.shrink_out);
        out[static_cast<int64_t>(pairs[i]) * p.rank + rank_block * kRankTile + r] =
            narrow<kBf16>(total);
      }
    }
  }
}

/// grid (max_tiles, ceil(H / 256)) x 256: one column per thread; B row read once per tile.
template <bool kBf16, int kRank>
__global__ void __launch_bounds__(kGroupExpandCols) grouped_expand_kernel(GroupedParams p) {
  __shared__ float srow[kGroupTileRoutes][kRank];
  __shared__ int spair[kGroupTileRoutes];
  dev::pdl_wait();
  dev::pdl_trigger();
  const GroupedWs w = grouped_ws(p);
  if (static_cast<int>(blockIdx.x) >= w.header[0]) return;
  const int4 info = w.tile_info[blockIdx.x];
  const int first = info.x, n = info.y, bin = info.z;
  const uint16_t* shrink = static_cast<const uint16_t*>(p.shrink_out);
  for (int idx = threadIdx.x; idx < n * kRank; idx += blockDim.x) {
    const int i = idx / kRank, r = idx % kRank;
    const int pair = w.sorted_routes[first + i];
    if (r == 0) spair[i] = pair;
    srow[i][r] = widen<kBf16>(shrink[static_cast<int64_t>(pair) * kRank + r]);
  }
  __syncthreads();
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kGroupExpandCols + threadIdx.x;
  if (c >= p.hidden) return;
  const uint16_t* brow = static_cast<const uint16_t*>(p.lora_b) +
                         (static_cast<int64_t>(bin) * p.hidden + c) * kRank;
  float b[kRank];
#pragma unroll
  for (int g = 0; g < kRank / 8; ++g) load8<kBf16>(brow + 8 * g, b + 8 * g);
  constexpr int kGroups = kRank / 8;
  for (int i = 0; i < n; ++i) {
    float lanes[kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      float part = 0.0f;
#pragma unroll
      for (int r = 8 * g; r < 8 * g + 8; ++r) part = fmaf(srow[i][r], b[r], part);
      lanes[g] = part;
    }
    // Lane 0 of the XOR butterfly (offsets G/2 .. 1): lanes >= off mirror lanes < off.
#pragma unroll
    for (int off = kGroups / 2; off >= 1; off /= 2) {
#pragma unroll
      for (int g = 0; g < off; ++g) lanes[g] = lanes[g] + lanes[g + off];
    }
    p.partials[static_cast<int64_t>(spair[i]) * p.hidden + c] = lanes[0];
  }
}

/// grid ceil(H / kCols) x 256, dynamic smem P x kCols fp32: the slab expand. The CTA owns
/// columns [c0, c0 + kCols) of every token. Phase 1: one thread per (sorted route, column),
/// kBatch routes in flight per thread (B row and shrink row loads issued together; routes of one
/// bin sit next to each other, so a warp's B loads of a bin coalesce), each route's unweighted
/// partial (the grouped expand's arithmetic) into part[pair][c]. Phase 2: one thread per token
/// sums its sorted slots' partials times their weights in ascending pair order (the combine's
/// arithmetic) and stores the token's kCols columns. Same bits as grouped expand + combine,
/// without the [P, H] fp32 round trip through HBM. Needs the one-CTA index (sorted_bins, sorted
/// token slots and their weights).
template <bool kBf16, int kRank, int kCols>
__global__ void __launch_bounds__(kGroupSlabThreads) grouped_slab_kernel(GroupedParams p) {
  extern __shared__ float part[];  // [P][kCols]
  constexpr int kGroups = kRank / 8;
  constexpr int kBatch = kGroups >= 8 ? 1 : 8 / kGroups;  // 64 registers of raw rows
  dev::pdl_wait();  // shrink rows (and, before them, the index) are complete
  const GroupedWs w = grouped_ws(p);
  const int c0 = blockIdx.x * kCols;
  const int items = w.bin_offset[p.num_loras * p.num_experts] * kCols;
  const uint4* shrink = static_cast<const uint4*>(p.shrink_out);
  const uint4* lora_b = static_cast<const uint4*>(p.lora_b);
  for (int base = threadIdx.x; base < items; base += kGroupSlabThreads * kBatch) {
    int pair[kBatch], bin[kBatch], col[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int item = base + j * kGroupSlabThreads;
      const int i = item / kCols;
      col[j] = item % kCols;
      const bool ok = item < items && c0 + col[j] < p.hidden;
      pair[j] = ok ? w.sorted_routes[i] : -1;
      bin[j] = ok ? w.sorted_bins[i] : 0;
    }
    uint4 braw[kBatch][kGroups], sraw[kBatch][kGroups];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (pair[j] < 0) continue;
      const int64_t row = static_cast<int64_t>(bin[j]) * p.hidden + c0 + col[j];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        braw[j][g] = lora_b[row * kGroups + g];
        sraw[j][g] = shrink[static_cast<int64_t>(pair[j]) * kGroups + g];
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (pair[j] < 0) continue;
      float lanes[kGroups];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        float b[8], srow[8];
        dev::unpack8<!kBf16>(braw[j][g], b);
        dev::unpack8<!kBf16>(sraw[j][g], srow);
        float acc = 0.0f;
#pragma unroll
        for (int r = 0; r < 8; ++r) acc = fmaf(srow[r], b[r], acc);
        lanes[g] = acc;
      }
#pragma unroll
      for (int off = kGroups / 2; off >= 1; off /= 2) {
#pragma unroll
        for (int g = 0; g < off; ++g) lanes[g] = lanes[g] + lanes[g + off];
      }
      part[pair[j] * kCols + col[j]] = lanes[0];
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < p.num_tokens; t += kGroupSlabThreads) {
    const int count = w.token_count[t];
    float y[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) y[c] = 0.0f;
    if (count <= kGroupTokenSlots) {
      for (int j = 0; j < count; ++j) {
        const int pair = w.token_slots[t * kGroupTokenSlots + j];
        const float weight = w.token_weights[t * kGroupTokenSlots + j];
#pragma unroll
        for (int c = 0; c < kCols; ++c) y[c] = fmaf(part[pair * kCols + c], weight, y[c]);
      }
    } else {
      // More than 16 routes: exact scan of all pairs in ascending order.
      for (int i = 0; i < p.num_pairs; ++i) {
        if (p.sorted_token_ids[i] != t) continue;
        if (route_bin(p.sorted_token_ids, p.expert_ids, p.lora_indices, i, p.num_tokens,
                      p.num_loras, p.num_experts) < 0) {
          continue;
        }
        const float weight = p.topk_weights[i];
#pragma unroll
        for (int c = 0; c < kCols; ++c) y[c] = fmaf(part[i * kCols + c], weight, y[c]);
      }
    }
    float* out = p.y + static_cast<int64_t>(t) * p.y_row_stride + c0;
#pragma unroll
    for (int q = 0; q < kCols / 4; ++q) {
      if (c0 + 4 * q < p.hidden) {
        *reinterpret_cast<float4*>(out + 4 * q) = make_float4(y[4 * q], y[4 * q + 1],
                                                              y[4 * q + 2], y[4 * q + 3]);
      }
    }
  }
}

/// grid (T, ceil(H / 256)) x 256: y[t, c] = fma chain of partial * weight over the token's
/// routes in ascending pair order; 0 for tokens without routes or LoRA.
template <int kUnused = 0>
__global__ void __launch_bounds__(kGroupExpandCols) group_combine_kernel(GroupedParams p) {
  __shared__ int list[kGroupExpandCols];
  __shared__ int warp_counts[kGroupExpandCols / 32];
  dev::pdl_wait();
  const GroupedWs w = grouped_ws(p);
  const int t = blockIdx.x, tid = threadIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kGroupExpandCols + tid;
  const int count = w.token_count[t];
  float y = 0.0f;
  if (count <= kGroupTokenSlots) {
    // Sort the (unordered) slots ascending: each slot's rank = number of smaller pair ids.
    const int mine = tid < count ? w.token_slots[t * kGroupTokenSlots + tid] : 0;
    if (tid < count) {
      int rank = 0;
      for (int j = 0; j < count; ++j) rank += w.token_slots[t * kGroupTokenSlots + j] < mine;
      list[rank] = mine;
    }
    __syncthreads();
    if (c < p.hidden) {
      for (int j = 0; j < count; ++j) {
        const int pair = list[j];
        y = fmaf(p.partials[static_cast<int64_t>(pair) * p.hidden + c], p.topk_weights[pair], y);
      }
    }
  } else {
    // More than 16 routes: exact scan of all pairs, compacted in ascending order per chunk.
    const int lane = tid & 31, warp = tid >> 5;
    for (int base = 0; base < p.num_pairs; base += kGroupExpandCols) {
      const int i = base + tid;
      const bool mine = i < p.num_pairs && p.sorted_token_ids[i] == t &&
                        route_bin(p.sorted_token_ids, p.expert_ids, p.lora_indices, i,
                                  p.num_tokens, p.num_loras, p.num_experts) >= 0;
      const unsigned ballot = __ballot_sync(0xFFFFFFFFu, mine);
      if (lane == 0) warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int offset = 0, chunk_count = 0;
      for (int wi = 0; wi < kGroupExpandCols / 32; ++wi) {
        if (wi < warp) offset += warp_counts[wi];
        chunk_count += warp_counts[wi];
      }
      if (mine) list[offset + __popc(ballot & ((1u << lane) - 1u))] = i;
      __syncthreads();
      if (c < p.hidden) {
        for (int j = 0; j < chunk_count; ++j) {
          const int pair = list[j];
          y = fmaf(p.partials[static_cast<int64_t>(pair) * p.hidden + c], p.topk_weights[pair],
                   y);
        }
      }
      __syncthreads();
    }
  }
  if (c < p.hidden) p.y[static_cast<int64_t>(t) * p.y_row_stride + c] = y;
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
