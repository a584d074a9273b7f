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
/// rank rows, in parts of 4 routes (32 accumulators per thread). kStage 1: the 8 x H block of A is
/// copied into dynamic shared memory once (cp.async, all of it in flight from the CTA's first
/// instructions) and every part reads it there; kStage 2: also the x rows of the first part,
/// whose addresses are found while A is in flight. kStage 0: parts after the first re-read A
/// through L1/L2. The arithmetic is the same in every form.
template <bool kBf16, int kStage>
__global__ void __launch_bounds__(kShrinkThreads) grouped_shrink_kernel(GroupedParams p) {
  extern __shared__ uint4 stage_vec[];
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
  const int row_vectors = static_cast<int>(h / 8);
  const uint16_t* a_global = static_cast<const uint16_t*>(p.lora_a) +
                             (static_cast<int64_t>(bin) * p.rank + rank_block * kRankTile) * h;
  const uint16_t* a = a_global;
  if constexpr (kStage >= 1) {
    const uint4* src = reinterpret_cast<const uint4*>(a_global);
    for (int v = tid; v < kRankTile * row_vectors; v += kShrinkThreads) {
      dev::cp_async16(&stage_vec[v], src + v, true);
    }
    a = reinterpret_cast<const uint16_t*>(stage_vec);
  }
  const int first_part = min(kGroupShrinkPart, routes);
  const uint16_t* x_first[kGroupShrinkPart];
#pragma unroll
  for (int i = 0; i < kGroupShrinkPart; ++i) {
    const int pair = w.sorted_routes[first + min(i, first_part - 1)];
    x_first[i] = static_cast<const uint16_t*>(p.x) + p.sorted_token_ids[pair] * h;
  }
  if constexpr (kStage == 2) {
    uint4* x_stage = stage_vec + kRankTile * row_vectors;
    for (int i = 0; i < first_part; ++i) {
      const uint4* src = reinterpret_cast<const uint4*>(x_first[i]);
      for (int v = tid; v < row_vectors; v += kShrinkThreads) {
        dev::cp_async16(&x_stage[i * row_vectors + v], src + v, true);
      }
      x_first[i] = reinterpret_cast<const uint16_t*>(x_stage + i * row_vectors);
    }
  }
  if constexpr (kStage >= 1) {
    dev::cp_async_commit();
    dev::cp_async_wait<0>();
    __syncthreads();
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
      xs[i] = part == 0 ? x_first[i]
                        : static_cast<const uint16_t*>(p.x) + p.sorted_token_ids[pairs[i]] * h;
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

/// grid (max_tiles, ceil(H / 256)) x 256: one column per thread; B row read once per tile, its
/// loads issued before the tile's shrink rows are staged (they need only the tile's bin).
template <bool kBf16, int kRank>
__global__ void __launch_bounds__(kGroupExpandCols) grouped_expand_kernel(GroupedParams p) {
  __shared__ float srow[kGroupTileRoutes][kRank];
  __shared__ int spair[kGroupTileRoutes];
  constexpr int kGroups = kRank / 8;
  dev::pdl_wait();
  dev::pdl_trigger();
  const GroupedWs w = grouped_ws(p);
  if (static_cast<int>(blockIdx.x) >= w.header[0]) return;
  const int4 info = w.tile_info[blockIdx.x];
  const int first = info.x, n = info.y, bin = info.z;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kGroupExpandCols + threadIdx.x;
  const bool column = c < p.hidden;
  uint4 braw[kGroups];
  if (column) {
    const uint4* brow =
        reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.lora_b) +
                                       (static_cast<int64_t>(bin) * p.hidden + c) * kRank);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) braw[g] = brow[g];
  }
  const uint16_t* shrink = static_cast<const uint16_t*>(p.shrink_out);
  for (int idx = threadIdx.x; idx < n * kRank; idx += blockDim.x) {
    const int i = idx / kRank, r = idx % kRank;
    const int pair = w.sorted_routes[first + i];
    if (r == 0) spair[i] = pair;
    srow[i][r] = widen<kBf16>(shrink[static_cast<int64_t>(pair) * kRank + r]);
  }
  __syncthreads();
  if (!column) return;
  float b[kRank];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) dev::unpack8<!kBf16>(braw[g], b + 8 * g);
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

/// grid T x 256: one token per CTA, all its columns (4 per thread per step, float4 loads of the
/// partials): y[t, c] = fma chain of partial * weight over the token's routes in ascending pair
/// order from 0 (reference::bgmv's grouped order); 0 for tokens without routes or LoRA.
template <int kUnused = 0>
__global__ void __launch_bounds__(kGroupCombineThreads) group_combine_kernel(GroupedParams p) {
  __shared__ int list[kGroupCombineThreads];
  __shared__ float weight[kGroupCombineThreads];
  __shared__ int warp_counts[kGroupCombineThreads / 32];
  dev::pdl_wait();
  const GroupedWs w = grouped_ws(p);
  const int t = blockIdx.x, tid = threadIdx.x;
  const int h = p.hidden;
  const int count = w.token_count[t];
  float* y = p.y + static_cast<int64_t>(t) * p.y_row_stride;
  const auto accumulate = [&](int n, int c, float4& acc) {
    for (int j = 0; j < n; ++j) {
      const float4 v =
          *reinterpret_cast<const float4*>(p.partials + static_cast<int64_t>(list[j]) * h + c);
      const float wj = weight[j];
      acc.x = fmaf(v.x, wj, acc.x);
      acc.y = fmaf(v.y, wj, acc.y);
      acc.z = fmaf(v.z, wj, acc.z);
      acc.w = fmaf(v.w, wj, acc.w);
    }
  };
  if (count <= kGroupTokenSlots) {
    // Sort the (unordered) slots ascending: each slot's rank = number of smaller pair ids.
    if (tid < count) {
      const int mine = w.token_slots[t * kGroupTokenSlots + tid];
      int rank = 0;
      for (int j = 0; j < count; ++j) rank += w.token_slots[t * kGroupTokenSlots + j] < mine;
      list[rank] = mine;
      weight[rank] = p.topk_weights[mine];
    }
    __syncthreads();
    for (int c = 4 * tid; c < h; c += 4 * kGroupCombineThreads) {
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      accumulate(count, c, acc);
      *reinterpret_cast<float4*>(y + c) = acc;
    }
    return;
  }
  // More than 16 routes: exact scan of all pairs, compacted in ascending order per chunk of 256,
  // once per column step.
  const int lane = tid & 31, warp = tid >> 5;
  for (int c0 = 0; c0 < h; c0 += 4 * kGroupCombineThreads) {
    const int c = c0 + 4 * tid;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
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
    if (c < h) *reinterpret_cast<float4*>(y + c) = acc;
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
