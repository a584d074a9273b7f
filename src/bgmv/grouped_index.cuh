// Grouped pipeline index stages (spec bgmv §5): group_hist, group_scan, group_scatter. They sort
// the valid routes by (lora, expert) bin (stable: CTA order, then pair order), cut each bin into
// tiles of <= 16 routes, and list each token's routes (<= 16 slots; the combine scans beyond).
#pragma once

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/grouped_common.cuh"
#include "bgmv/grouped_launch.h"
#include "ptx/cache_hints.cuh"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// Workspace views (layout: grouped_launch.h).
struct GroupedWs {
  int* header;
  int* bin_offset;
  int* tile_start;  ///< scratch of group_scan (tile counts, then tile bases per bin)
  int* sorted_routes;
  int* token_count;
  int* token_slots;
  int* hist;
  int* cta_base;
  int4* tile_info;  ///< {first route in sorted_routes, routes (1..16), bin, 0}
  uint16_t* tile_rows;  ///< [P][R] the shrink rows again, in sorted-route order
};

CAKEMOE_HD GroupedWs grouped_ws(const GroupedParams& p) {
  const int bins = p.num_loras * p.num_experts;
  GroupedWs w;
  w.header = p.workspace;
  w.bin_offset = w.header + 4;
  w.tile_start = w.bin_offset + bins + 1;
  w.sorted_routes = w.tile_start + p.max_tiles;
  w.token_count = w.sorted_routes + p.num_pairs;
  w.token_slots = w.token_count + p.num_tokens;
  w.hist = w.token_slots + kGroupTokenSlots * p.num_tokens;
  w.cta_base = w.hist + p.hist_ctas * bins;
  // NOTE: int_words keeps tile_info 16-byte aligned (grouped_workspace pads before it).
  int* after = w.cta_base + p.hist_ctas * bins;
  after += (4 - reinterpret_cast<uintptr_t>(after) / sizeof(int) % 4) % 4;
  w.tile_info = reinterpret_cast<int4*>(after);
  w.tile_rows = reinterpret_cast<uint16_t*>(w.tile_info + p.max_tiles);
  return w;
}

/// L2 policies of the grouped stages: bytes read once (A, B, the partials in the combine) are
/// evicted first, bytes the next stage reads again (the partials the expand writes) last.
CAKEMOE_DEVICE uint64_t read_once_policy() { return ptx::createpolicy_evict_first(); }
CAKEMOE_DEVICE uint64_t read_again_policy() { return ptx::createpolicy_evict_last(); }

/// A sorted_routes entry (GroupedParams::packed_routes) and its two fields.
CAKEMOE_DEVICE int route_entry(const GroupedParams& p, int pair, int token) {
  return p.packed_routes ? token << 16 | pair : pair;
}
CAKEMOE_DEVICE int route_pair(const GroupedParams& p, int entry) {
  return p.packed_routes ? entry & 0xFFFF : entry;
}
CAKEMOE_DEVICE int64_t route_token(const GroupedParams& p, int entry) {
  return p.packed_routes ? static_cast<int64_t>(entry >> 16) : p.sorted_token_ids[entry];
}
/// The x row of a sorted_routes entry's token (`hidden`: p.hidden, as the caller holds it).
CAKEMOE_DEVICE const uint16_t* route_x_row(const GroupedParams& p, int entry,
                                            int64_t hidden) {
  return static_cast<const uint16_t*>(p.x) + route_token(p, entry) * hidden;
}

CAKEMOE_DEVICE void hist_chunk(const GroupedParams& p, int* begin, int* end) {
  const int chunk = (p.num_pairs + p.hist_ctas - 1) / p.hist_ctas;
  *begin = min(p.num_pairs, static_cast<int>(blockIdx.x) * chunk);
  *end = min(p.num_pairs, *begin + chunk);
}

/// grid hist_ctas x 256, dynamic smem bins ints: per-CTA bin histogram; resets token_count
/// (read by the combine of the previous launch, incremented by this launch's scatter).
template <int kUnused = 0>
__global__ void __launch_bounds__(kGroupHistThreads) group_hist_kernel(GroupedParams p) {
  extern __shared__ int counts[];
  const int bins = p.num_loras * p.num_experts;
  const GroupedWs w = grouped_ws(p);
  ptx::griddep_launch_dependents();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) counts[b] = 0;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < p.num_tokens;
       t += gridDim.x * blockDim.x) {
    w.token_count[t] = 0;
  }
  __syncthreads();
  int begin = 0, end = 0;
  hist_chunk(p, &begin, &end);
  for (int i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const int key = route_bin(p.sorted_token_ids, p.expert_ids, p.lora_indices, i, p.num_tokens,
                              p.num_loras, p.num_experts);
    if (key >= 0) atomicAdd(&counts[key], 1);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) w.hist[blockIdx.x * bins + b] = counts[b];
}

/// 1 CTA x 1024: bin offsets, per-(CTA, bin) bases and the tile table.
template <int kUnused = 0>
__global__ void __launch_bounds__(1024) group_scan_kernel(GroupedParams p) {
  __shared__ int warp_sums[32];
  const int bins = p.num_loras * p.num_experts;
  const GroupedWs w = grouped_ws(p);
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();
  // Per bin: CTA-relative bases and the bin total (written into bin_offset, scanned below).
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    int total = 0;
    for (int c = 0; c < p.hist_ctas; ++c) {
      w.cta_base[c * bins + b] = total;
      total += w.hist[c * bins + b];
    }
    w.bin_offset[b] = total;
  }
  if (threadIdx.x == 0) w.bin_offset[bins] = 0;
  __syncthreads();
  // Tile counts go to tile_start[0, bins) first (max_tiles >= bins), scanned into tile bases.
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    w.tile_start[b] = (w.bin_offset[b] + kGroupTileRoutes - 1) / kGroupTileRoutes;
  }
  __syncthreads();
  block_exclusive_scan(w.bin_offset, bins + 1, warp_sums);
  const int tiles = block_exclusive_scan(w.tile_start, bins, warp_sums);
  // tile_start now holds each bin's tile base (scratch: only tile_info is read later).
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    const int start = w.bin_offset[b], count = w.bin_offset[b + 1] - start;
    for (int k = 0; k * kGroupTileRoutes < count; ++k) {
      w.tile_info[w.tile_start[b] + k] = make_int4(
          start + k * kGroupTileRoutes, min(kGroupTileRoutes, count - k * kGroupTileRoutes), b, 0);
    }
    for (int c = 0; c < p.hist_ctas; ++c) w.cta_base[c * bins + b] += start;
  }
  if (threadIdx.x == 0) w.header[0] = tiles;
}

/// grid hist_ctas x 256, dynamic smem bins ints: stable scatter of the routes into bin order,
/// per-token route slots, zero shrink rows of invalid pairs.
template <int kUnused = 0>
__global__ void __launch_bounds__(kGroupHistThreads) group_scatter_kernel(GroupedParams p) {
  extern __shared__ int cursor[];
  const int bins = p.num_loras * p.num_experts;
  const GroupedWs w = grouped_ws(p);
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    cursor[b] = w.cta_base[blockIdx.x * bins + b];
  }
  __syncthreads();
  int begin = 0, end = 0;
  hist_chunk(p, &begin, &end);
  uint16_t* shrink = static_cast<uint16_t*>(p.shrink_out);
  for (int round = begin; round < end; round += blockDim.x) {
    const int i = round + threadIdx.x;
    const int key = i < end ? route_bin(p.sorted_token_ids, p.expert_ids, p.lora_indices, i,
                                        p.num_tokens, p.num_loras, p.num_experts)
                            : -1;
    const int pos = stable_place(key, cursor);
    if (key >= 0) {
      const int t = static_cast<int>(p.sorted_token_ids[i]);
      w.sorted_routes[pos] = route_entry(p, i, t);
      const int slot = atomicAdd(&w.token_count[t], 1);
      if (slot < kGroupTokenSlots) w.token_slots[t * kGroupTokenSlots + slot] = i;
    } else if (i < end) {
      for (int r = 0; r < p.rank; ++r) shrink[static_cast<int64_t>(i) * p.rank + r] = 0;
    }
  }
}

constexpr int kBinBits = 12;  // bins <= 4096
/// Pairs per thread of the one-CTA index: the smallest of 2, 4, 8, 16 that covers P (the loop
/// over a thread's pairs is unrolled, so a smaller count is fewer instructions and registers).
constexpr int kIndexMaxPairsPerThread = kGroupFusedIndexMaxPairs / kGroupIndexThreads;
CAKEMOE_HD int index_pairs_per_thread(int pairs) {
  int per = 2;
  while (per < kIndexMaxPairsPerThread && per * kGroupIndexThreads < pairs) per *= 2;
  return per;
}
static_assert((kGroupFusedIndexMaxPairs << kBinBits) > 0, "key packing overflows");
static_assert(kGroupFusedIndexMaxPairs <= (1 << 14), "the packed bin scan holds P in 15 bits");

/// Shared memory of the one-CTA index: offsets and tile bases per bin (packed), the key of every
/// pair, when they fit (kGroupIndexSmemTokens) the per-token route counts, and sorted_routes
/// before its copy out. At most 208 KB (bins <= 4096, P <= 16384).
CAKEMOE_HD constexpr int index_smem_ints(int bins, int pairs, int tokens) {
  return bins + 1 + pairs + (tokens <= kGroupIndexSmemTokens ? tokens : 0) + pairs;
}
static_assert(index_smem_ints(1 << kBinBits, kGroupFusedIndexMaxPairs, kGroupIndexSmemTokens) *
                          sizeof(int) +
                      32 * sizeof(int) <=
                  227 * 1024,
              "the one-CTA index's largest shared memory (plus warp_sums) fits SM90's 227 KB");

/// 1 CTA x 1024, dynamic smem index_smem_ints() ints: the whole index of the grouped pipeline in
/// one launch (P <= kGroupFusedIndexMaxPairs). A route's place inside its bin and inside its
/// token's slot list comes from an atomic, so it varies between runs; nothing downstream depends
/// on it (each route's arithmetic is independent of its tile, and the combine sorts a token's
/// slots by pair id). Also zeroes the shrink rows of invalid pairs.
template <int kIndexPairsPerThread>
__global__ void __launch_bounds__(kGroupIndexThreads) group_index_kernel(GroupedParams p) {
  static_assert(kIndexPairsPerThread <= kIndexMaxPairsPerThread, "key[] holds at most 16384");
  extern __shared__ int smem[];
  __shared__ int warp_sums[32];
  const int bins = p.num_loras * p.num_experts;
  int* offs = smem;             // [bins + 1]: counts, then (route offset << 16 | tile base)
  int* key = offs + bins + 1;   // [P]: (place in bin << kBinBits) | bin, or -1
  const bool smem_tokens = p.num_tokens <= kGroupIndexSmemTokens;
  int* token_count = smem_tokens ? key + p.num_pairs : nullptr;
  int* sorted = key + p.num_pairs + (smem_tokens ? p.num_tokens : 0);  // [P]
  const GroupedWs w = grouped_ws(p);
  if (!smem_tokens) token_count = w.token_count;
  const int tid = threadIdx.x, nt = blockDim.x;
  ptx::griddep_launch_dependents();
  for (int b = tid; b <= bins; b += nt) offs[b] = 0;
  for (int t = tid; t < p.num_tokens; t += nt) token_count[t] = 0;
  // Every load of this thread's pairs first (tokens and experts, then LoRAs): two dependent
  // trips in all instead of two per pair.
  // NOTE: int32 copies (indices were validated at prepare), so the arrays stay in registers.
  int tok[kIndexPairsPerThread], exp[kIndexPairsPerThread], lora[kIndexPairsPerThread];
#pragma unroll
  for (int j = 0; j < kIndexPairsPerThread; ++j) {
    const int i = tid + j * nt;
    const int64_t t = i < p.num_pairs ? p.sorted_token_ids[i] : -1;
    tok[j] = t >= 0 && t < p.num_tokens ? static_cast<int>(t) : -1;
    exp[j] = i < p.num_pairs ? static_cast<int>(p.expert_ids[i]) : -1;
  }
#pragma unroll
  for (int j = 0; j < kIndexPairsPerThread; ++j) {
    lora[j] = tok[j] >= 0 ? static_cast<int>(p.lora_indices[tok[j]]) : -1;
  }
  __syncthreads();  // offs and token_count zeroed
  uint4* shrink = static_cast<uint4*>(p.shrink_out);
  const int row_vectors = p.rank / 8;
#pragma unroll
  for (int j = 0; j < kIndexPairsPerThread; ++j) {
    const int i = tid + j * nt;
    if (i >= p.num_pairs) continue;
    const bool valid = lora[j] >= 0 && lora[j] < p.num_loras && exp[j] >= 0 &&
                       exp[j] < p.num_experts;  // tok in range whenever lora >= 0
    if (valid) {
      const int bin = static_cast<int>(lora[j] * p.num_experts + exp[j]);
      key[i] = (atomicAdd(&offs[bin], 1) << kBinBits) | bin;
      const int t = static_cast<int>(tok[j]);
      const int slot = atomicAdd(&token_count[t], 1);
      if (slot < kGroupTokenSlots) w.token_slots[t * kGroupTokenSlots + slot] = i;
    } else {
      key[i] = -1;
      for (int v = 0; v < row_vectors; ++v) {
        shrink[static_cast<int64_t>(i) * row_vectors + v] = make_uint4(0, 0, 0, 0);
      }
    }
  }
  __syncthreads();
  if (smem_tokens) {
    for (int t = tid; t < p.num_tokens; t += nt) w.token_count[t] = token_count[t];
  }
  // One scan of (routes << 16 | tiles) per bin: route offsets in the high half, tile bases in the
  // low half (at most P tiles, P <= 2^14: no carry between the halves, no sign overflow).
  const int packed_total = block_exclusive_scan(offs, bins + 1, warp_sums, [&](int b, int count) {
    return b < bins ? count << 16 | (count + kGroupTileRoutes - 1) / kGroupTileRoutes : 0;
  });
  const int ntiles = packed_total & 0xFFFF;
  for (int b = tid; b <= bins; b += nt) w.bin_offset[b] = offs[b] >> 16;
  for (int b = tid; b < bins; b += nt) {
    const int start = offs[b] >> 16, count = (offs[b + 1] >> 16) - start;
    const int tile = offs[b] & 0xFFFF;
    for (int k = 0; k * kGroupTileRoutes < count; ++k) {
      const int first = start + k * kGroupTileRoutes;
      w.tile_info[tile + k] = make_int4(first, min(kGroupTileRoutes, start + count - first), b, 0);
    }
  }
  if (tid == 0) w.header[0] = ntiles;
    // NOTE: pair i = tid + j * nt is this thread's j-th pair: its token is still in tok[j].
    // The routes land in shared memory first and leave in one coalesced pass: scattered 4-byte
    // stores cost the index's single SM a store transaction each, and every later stage waits
    // until this grid's stores have drained.
#pragma unroll
  for (int j = 0; j < kIndexPairsPerThread; ++j) {
    const int i = tid + j * nt;
    if (i >= p.num_pairs) continue;
    const int k = key[i];
    if (k >= 0) {
      sorted[(offs[k & ((1 << kBinBits) - 1)] >> 16) + (k >> kBinBits)] = route_entry(p, i, tok[j]);
    }
  }
  __syncthreads();
  const int routes = packed_total >> 16;
  for (int i = tid; i < routes; i += nt) w.sorted_routes[i] = sorted[i];
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
