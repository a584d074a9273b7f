// Fused decode path: the Cake shrink (spec §4.1, §4.2) and the token-owned expand (§4.3) of a
// tiny batch in ONE cooperative launch (bench/NOTES.md, "BGMV Cake path on the H200", item 4).
// CTAs [0, S) are shrink CTAs, CTAs [S, S + X) expand CTAs that spin until all S shrink CTAs
// arrived. Bits: exactly the canonical order of §3.2 with the plan's split count, so the result
// equals the two-kernel path and the CPU reference (docs/decisions/bgmv-gpu-runtime.md).
//
// NOTE: why the spin cannot deadlock. (1) The launch is cooperative and the plan checked the
// grid against the occupancy at prepare, so every CTA of the grid is resident at once (the
// runtime refuses a cooperative grid that does not fit; it never runs part of it). (2) Shrink
// CTAs wait for nothing: every one of them, valid pair or not, reaches its single arrival
// increment. (3) Expand CTAs wait only for `arrive >= S`, which the S resident shrink CTAs reach.
// (4) The counters are 0 at launch entry: the last expand CTA past the wait resets them, after
// every expand CTA has read `arrive` for the last time, and the next launch is stream-ordered.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/decode_fused_launch.h"
#include "bgmv/route_index.cuh"
#include "bgmv/shrink_cake.cuh"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kFusedRankTile = kRankTile;          // rank rows per shrink CTA
constexpr int64_t kFusedTile = kFusedThreads * 8;  // K elements per shrink tile (§3.2)
constexpr int kFusedWarps = kFusedThreads / kWarp;
constexpr int kFusedBatch = 32;       // routes whose shrink rows are staged in smem at once
constexpr int kFusedRegVectors = 16;  // 16-byte B vectors an expand thread keeps in flight
// __launch_bounds__ occupancy target: 5 CTAs per SM on sm_90a (96 registers, no spills); the
// Blackwell ptxas spills at that budget, so 4 there (<= 128 registers; compile-only targets).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
constexpr int kFusedMinBlocks = 4;
#else
constexpr int kFusedMinBlocks = 5;
#endif

struct FusedShrinkShared {
  float warp_sums[kFusedWarps][kFusedRankTile];
};

template <int kRank>
struct FusedExpandShared {
  float rows[kFusedBatch][kRank];    // widened, rounded shrink rows of a route batch
  float weights[kFusedMaxPairs];     // routing weight per route (ascending pair order)
  int64_t b_offset[kFusedMaxPairs];  // element offset of B[l, e] per route
  int32_t routes[kFusedMaxPairs];    // pair id per route, ascending
  int warp_counts[kFusedWarps];
};

template <int kRank>
union FusedShared {
  FusedShrinkShared shrink;
  FusedExpandShared<kRank> expand;
};

/// Acquire load at GPU scope (PTX ISA: ld.acquire.gpu): later loads of this thread observe what
/// the releasing threads wrote before their arrival.
CAKEMOE_DEVICE uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

CAKEMOE_DEVICE void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

/// 16 bytes of a 16-bit row at element k (read-only path), or zeros (masked tail, inactive).
CAKEMOE_DEVICE uint4 load16_or_zero(const uint16_t* row, int64_t k, int64_t hidden, bool ok) {
  return ok && k < hidden ? __ldg(reinterpret_cast<const uint4*>(row + k)) : make_uint4(0, 0, 0, 0);
}

/// Shrink role: one (pair, 8 rank rows, split). Same per-thread chains, butterflies and warp
/// order as cake_shrink_kernel; the split partial goes to the route index's partial region.
/// Tokens without LoRA and padding pairs: split 0 writes the zero shrink_out row.
template <bool kFp16, int kRank>
CAKEMOE_DEVICE void fused_shrink(const CakeParams& p, int64_t b, FusedShrinkShared& sh) {
  constexpr int kBlocks = kRank / kFusedRankTile;
  const int tid = threadIdx.x;
  const int64_t pair = b / (kBlocks * p.splits);
  const int rb = static_cast<int>((b / p.splits) % kBlocks);
  const int z = static_cast<int>(b % p.splits);
  // NOTE: token, expert and (T <= 32) every token's LoRA index in one round trip: lane i holds
  // lora_indices[i], so the pair's LoRA is a shuffle away (bench/NOTES.md item 4a, one trip less).
  const bool lora_in_lanes = p.T <= kWarp;
  const int lane = tid % kWarp;
  const int64_t lane_lora = lora_in_lanes && lane < p.T ? p.lora_indices[lane] : -1;
  const int64_t t = p.sorted_token_ids[pair];
  const int64_t e = p.expert_ids[pair];
  const bool token_ok = t >= 0 && t < p.T;
  const int64_t tiles = (p.H + kFusedTile - 1) / kFusedTile;
  const int64_t per_split = (tiles + p.splits - 1) / p.splits;
  const int64_t t0 = min(static_cast<int64_t>(z) * per_split, tiles);
  const int64_t t1 = min(static_cast<int64_t>(z + 1) * per_split, tiles);
  const uint16_t* x_row = static_cast<const uint16_t*>(p.x) + (token_ok ? t : 0) * p.H;
  // The first x chunk is in flight together with lora_indices[t] when T > 32.
  uint4 xv = load16_or_zero(x_row, t0 * kFusedTile + 8 * tid, p.H, token_ok && t0 < t1);
  int64_t l = -1;
  if (lora_in_lanes) {
    const int src = token_ok ? static_cast<int>(t) : 0;
    const int64_t shuffled = __shfl_sync(0xFFFFFFFFu, lane_lora, src);
    l = token_ok ? shuffled : -1;
  } else if (token_ok) {
    l = p.lora_indices[t];
  }
  if (l < 0) {  // padding or no LoRA: a zero row (§2 rule 1), no partial (no expand reads it)
    uint16_t* out = static_cast<uint16_t*>(p.shrink_out) + pair * kRank + rb * kFusedRankTile;
    if (z == 0 && tid < kFusedRankTile) out[tid] = 0;
    return;
  }
  const uint16_t* a_rows =
      static_cast<const uint16_t*>(p.lora_a) + ((l * p.E + e) * kRank + rb * kFusedRankTile) * p.H;
  uint4 av[kFusedRankTile];
#pragma unroll
  for (int i = 0; i < kFusedRankTile; ++i) {
    av[i] = load16_or_zero(a_rows + i * p.H, t0 * kFusedTile + 8 * tid, p.H, t0 < t1);
  }
  // Per-thread fma chains over the split's tiles, next tile's loads in flight (register ring).
  float acc[kFusedRankTile];
#pragma unroll
  for (int i = 0; i < kFusedRankTile; ++i) acc[i] = 0.0f;
  for (int64_t tile = t0; tile < t1; ++tile) {
    const bool more = tile + 1 < t1;
    const int64_t kn = (tile + 1) * kFusedTile + 8 * tid;
    const uint4 xn = load16_or_zero(x_row, kn, p.H, more);
    uint4 an[kFusedRankTile];
#pragma unroll
    for (int i = 0; i < kFusedRankTile; ++i) {
      an[i] = load16_or_zero(a_rows + i * p.H, kn, p.H, more);
    }
    shrink_fma_chunk<kFp16>(xv, av, acc);
    xv = xn;
#pragma unroll
    for (int i = 0; i < kFusedRankTile; ++i) av[i] = an[i];
  }
  // Warp butterflies, then warp sums in warp order from 0.0f (§3.2).
  const int warp = tid / kWarp;
#pragma unroll
  for (int i = 0; i < kFusedRankTile; ++i) {
    const float v = warp_butterfly(acc[i]);
    if (tid % kWarp == 0) sh.warp_sums[warp][i] = v;
  }
  __syncthreads();
  if (tid < kFusedRankTile) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kFusedWarps; ++w) sum = sum + sh.warp_sums[w][tid];
    float* partials = RouteIndex{p.route_index, p.T}.split_partials();
    partials[(z * p.P + pair) * kRank + rb * kFusedRankTile + tid] = sum;
  }
}

/// One route of the expand in the order of §3.2 (as expand_routes): per rank group an fma chain
/// over 8 ranks from 0, then acc[g] = fma(part, w, acc[g]).
template <bool kFp16, int kGroups>
CAKEMOE_DEVICE void fused_accumulate(const float* row, const uint4* b, float w, float* acc) {
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    float bf[8];
    unpack8<kFp16>(b[g], bf);
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) part = fmaf(row[8 * g + i], bf[i], part);
    acc[g] = fmaf(part, w, acc[g]);
  }
}

/// Waits until all shrink CTAs arrived; the last expand CTA past the wait resets both counters
/// and advances the §3.3 header (word0 launches, word1 parity) like the per-route expand.
CAKEMOE_DEVICE void fused_wait(const FusedDecodeParams& fp) {
  const RouteIndex ri{fp.cake.route_index, fp.cake.T};
  uint32_t* arrive = ri.split_counters();
  uint32_t* passed = arrive + 1;
  if (threadIdx.x == 0) {
    const uint32_t target = static_cast<uint32_t>(fp.shrink_ctas);
    while (ld_acquire_gpu(arrive) < target) {
    }
    __threadfence();
    if (atomicAdd(passed, 1u) == static_cast<uint32_t>(fp.expand_ctas - 1)) {
      atomicExch(arrive, 0u);
      atomicExch(passed, 0u);
      const uint32_t launch = load_word(ri.launch_counter());
      *ri.parity() = launch & 1u;
      *ri.launch_counter() = launch + 1u;
    }
  }
  __syncthreads();
}

/// Expand role: token t, columns [cb * 128, cb * 128 + 128), one thread per column.
template <bool kFp16, int kRank>
CAKEMOE_DEVICE void fused_expand(const FusedDecodeParams& fp, int64_t b,
                                 FusedExpandShared<kRank>& sh) {
  constexpr int kGroups = kRank / 8;
  constexpr int kChunk = kFusedRegVectors / kGroups;  // routes per register chunk
  const CakeParams& p = fp.cake;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int64_t col_blocks = (p.H + kFusedCols - 1) / kFusedCols;
  const int64_t t = b / col_blocks;
  const int64_t col = (b % col_blocks) * kFusedCols + tid;
  const bool col_ok = col < p.H;
  const bool leader = b % col_blocks == 0;  // stores the token's shrink_out rows

  // Route discovery, one round trip: the LoRA index and thread tid's pair (P <= 128).
  const int64_t l = p.lora_indices[t];
  const bool has_pair = tid < p.P;
  const int64_t pair_token = has_pair ? p.sorted_token_ids[tid] : -1;
  const int64_t pair_expert = has_pair ? p.expert_ids[tid] : 0;
  const float pair_weight = has_pair ? p.topk_weights[tid] : 0.0f;
  const bool match = has_pair && pair_token == t;
  const unsigned ballot = __ballot_sync(0xFFFFFFFFu, match);
  if (lane == 0) sh.warp_counts[warp] = __popc(ballot);
  __syncthreads();
  int slot = __popc(ballot & ((1u << lane) - 1u)), n = 0;
#pragma unroll
  for (int w = 0; w < kFusedWarps; ++w) {
    if (w < warp) slot += sh.warp_counts[w];
    n += sh.warp_counts[w];
  }
  if (match) {  // ascending pair order: warps in order, lanes in order
    sh.routes[slot] = tid;
    sh.weights[slot] = pair_weight;
    sh.b_offset[slot] = (l * p.E + pair_expert) * p.H * kRank;
  }
  __syncthreads();
  if (l < 0) n = 0;  // no LoRA: y row = 0 (§2 rule 4)

  // Before the wait (inputs only): the first chunk of B rows into registers, the rest into L2.
  const uint16_t* lora_b = static_cast<const uint16_t*>(p.lora_b);
  uint4 bv[kChunk][kGroups];
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    const bool ok = j < n && col_ok;
    const uint4* row =
        reinterpret_cast<const uint4*>(lora_b + (ok ? sh.b_offset[j] + col * kRank : 0));
#pragma unroll
    for (int g = 0; g < kGroups; ++g) bv[j][g] = ok ? __ldg(row + g) : make_uint4(0, 0, 0, 0);
  }
  if (col_ok) {
    for (int j = kChunk; j < n; ++j) prefetch_l2(lora_b + sh.b_offset[j] + col * kRank);
  }

  fused_wait(fp);

  const float* partials = RouteIndex{p.route_index, p.T}.split_partials();
  uint16_t* shrink_out = static_cast<uint16_t*>(p.shrink_out);
  float acc[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) acc[g] = 0.0f;
  for (int b0 = 0; b0 < n; b0 += kFusedBatch) {
    const int nb = min(kFusedBatch, n - b0);
    if (b0 > 0) __syncthreads();  // every thread is done with the previous batch's rows
    // Split partials summed in split order from 0.0f, rounded (§4.2): the shrink_out value.
    for (int i = tid; i < nb * kRank; i += kFusedThreads) {
      const int j = i / kRank, r = i % kRank;
      const int64_t pair = sh.routes[b0 + j];
      float total = 0.0f;
      for (int z = 0; z < p.splits; ++z) {
        total = total + __ldcg(partials + (z * p.P + pair) * kRank + r);
      }
      const uint16_t bits = narrow<kFp16>(total);
      sh.rows[j][r] = widen<kFp16>(bits);
      if (leader) shrink_out[pair * kRank + r] = bits;
    }
    __syncthreads();
    if (!col_ok) continue;
    int j = 0;
    if (b0 == 0) {  // the prefetched chunk (kChunk <= kFusedBatch)
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        if (c < nb) fused_accumulate<kFp16, kGroups>(sh.rows[c], bv[c], sh.weights[c], acc);
      }
      j = kChunk;
    }
    for (; j < nb; j += kChunk) {  // later routes: a chunk of loads in flight, then the math
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        const bool ok = j + c < nb;
        const uint4* row = reinterpret_cast<const uint4*>(
            lora_b + (ok ? sh.b_offset[b0 + j + c] + col * kRank : 0));
#pragma unroll
        for (int g = 0; g < kGroups; ++g) bv[c][g] = ok ? __ldg(row + g) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        if (j + c < nb) {
          fused_accumulate<kFp16, kGroups>(sh.rows[j + c], bv[c], sh.weights[b0 + j + c], acc);
        }
      }
    }
  }
  if (col_ok) p.y[t * p.y_row_stride + col] = butterfly_lane0<kGroups>(acc);
}

template <bool kFp16, int kRank>
__global__ void __launch_bounds__(kFusedThreads, kFusedMinBlocks)
    fused_decode_kernel(const FusedDecodeParams p) {
  __shared__ FusedShared<kRank> sh;
  const int64_t b = blockIdx.x;
  if (b < p.shrink_ctas) {
    fused_shrink<kFp16, kRank>(p.cake, b, sh.shrink);
    // Release: the partial / zero row, then this CTA's one arrival (every path gets here).
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(RouteIndex{p.cake.route_index, p.cake.T}.split_counters(), 1u);
    }
  } else {
    fused_expand<kFp16, kRank>(p, b - p.shrink_ctas, sh.expand);
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
