// Cake generic expand (spec §4.3): token-owned, grid (T, ceil(H / kCols)), one thread per output
// column holding the R/8 rank-group accumulators of §3.2 and folding them with the fixed
// butterfly. Route discovery and the route index epilogue follow §3.3.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "bgmv/route_index.cuh"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kExpandBatch = 32;  // routes whose shrink rows are staged in shared memory at once

enum RouteMode : int { kNoRoutes = 0, kRouteList = 1, kSerialScan = 2 };

/// Shared state of one expand CTA.
template <int kRank, int kCols>
struct ExpandShared {
  float rows[kExpandBatch][kRank];  // widened shrink rows of the staged routes
  float weights[kExpandBatch];
  int64_t b_offset[kExpandBatch];   // element offset of B[l, e] for each staged route
  int64_t routes[kCols > kMaxIndexedRoutes ? kCols : kMaxIndexedRoutes];
  int warp_counts[kCols / kWarp];
  int count;
  int mode;
};

/// Thread 0: the routes of token t from the route index (§3.3 steps 1-2), ascending in shared
/// memory; kSerialScan when more than 16 were published.
/// `at0` / `at1`: pair 2t / 2t+1 holds t with P == 2T (implicit, never published).
template <int kRank, int kCols>
CAKEMOE_DEVICE void find_routes(const CakeParams& p, int64_t t, uint32_t published, bool at0,
                                bool at1, ExpandShared<kRank, kCols>& sh) {
  const RouteIndex ri{p.route_index, p.T};
  // NOTE: the contiguous fast path also needs an empty published list: with P == 2T a token may
  // sit at 2t, 2t+1 and still own a route elsewhere (another token then owns fewer).
  if (published > static_cast<uint32_t>(kSlotsPerToken)) {
    sh.mode = kSerialScan;
    return;
  }
  int n = 0;
  for (uint32_t i = 0; i < published; ++i) sh.routes[n++] = load_word(ri.slots(t) + i);
  if (at0) sh.routes[n++] = 2 * t;
  if (at1) sh.routes[n++] = 2 * t + 1;
  for (int i = 1; i < n; ++i) {  // insertion sort of at most 18 pair ids
    const int64_t v = sh.routes[i];
    int j = i - 1;
    while (j >= 0 && sh.routes[j] > v) {
      sh.routes[j + 1] = sh.routes[j];
      --j;
    }
    sh.routes[j + 1] = v;
  }
  sh.count = n;
  sh.mode = n > 0 ? kRouteList : kNoRoutes;
}

/// Accumulates routes[0..n) (ascending) into the thread's rank-group accumulators.
template <bool kFp16, int kRank, int kCols>
CAKEMOE_DEVICE void expand_routes(const CakeParams& p, int64_t l, const int64_t* routes, int n,
                                  int64_t col, ExpandShared<kRank, kCols>& sh, float* acc) {
  constexpr int kGroups = kRank / 8;
  const int tid = threadIdx.x;
  const uint16_t* shrink = static_cast<const uint16_t*>(p.shrink_out);
  const uint16_t* lora_b = static_cast<const uint16_t*>(p.lora_b);
  for (int b0 = 0; b0 < n; b0 += kExpandBatch) {
    const int nb = min(kExpandBatch, n - b0);
    for (int i = tid; i < nb * kRank; i += kCols) {
      const int j = i / kRank;
      sh.rows[j][i % kRank] = widen<kFp16>(shrink[routes[b0 + j] * kRank + i % kRank]);
    }
    if (tid < nb) {
      const int64_t pair = routes[b0 + tid];
      sh.weights[tid] = p.topk_weights[pair];
      sh.b_offset[tid] = (l * p.E + p.expert_ids[pair]) * p.H * kRank;
    }
    __syncthreads();
    if (col < p.H) {
      for (int j = 0; j < nb; ++j) {
        const uint4* b_row = reinterpret_cast<const uint4*>(lora_b + sh.b_offset[j] + col * kRank);
        const float w = sh.weights[j];
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          float bf[8];
          unpack8<kFp16>(b_row[g], bf);
          float part = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) part = fmaf(sh.rows[j][8 * g + i], bf[i], part);
          acc[g] = fmaf(part, w, acc[g]);
        }
      }
    }
    __syncthreads();
  }
}

/// §3.3 step 3: every pair of token t in ascending order, a CTA-wide chunk at a time.
template <bool kFp16, int kRank, int kCols>
CAKEMOE_DEVICE void expand_serial_scan(const CakeParams& p, int64_t t, int64_t l, int64_t col,
                                       ExpandShared<kRank, kCols>& sh, float* acc) {
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  for (int64_t start = 0; start < p.P; start += kCols) {
    const int64_t pair = start + tid;
    const bool match = pair < p.P && p.sorted_token_ids[pair] == t;
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, match);
    if (lane == 0) sh.warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int offset = __popc(ballot & ((1u << lane) - 1u)), total = 0;
    for (int w = 0; w < kCols / kWarp; ++w) {
      if (w < warp) offset += sh.warp_counts[w];
      total += sh.warp_counts[w];
    }
    if (match) sh.routes[offset] = pair;
    __syncthreads();
    expand_routes<kFp16, kRank, kCols>(p, l, sh.routes, total, col, sh, acc);
  }
}

/// Pulls this column's B rows of the contiguous routes 2t, 2t+1 into L2 while the shrink still
/// runs (PDL) or while thread 0 discovers the routes. Reads inputs only, never shrink outputs.
template <int kRank>
CAKEMOE_DEVICE void prefetch_contiguous_b(const CakeParams& p, int64_t t, int64_t l,
                                          int64_t col) {
  if (l < 0 || col >= p.H || p.P != 2 * p.T) return;
  const uint16_t* lora_b = static_cast<const uint16_t*>(p.lora_b);
  for (int64_t pair = 2 * t; pair < 2 * t + 2; ++pair) {
    if (p.sorted_token_ids[pair] != t) continue;
    const uint16_t* row = lora_b + ((l * p.E + p.expert_ids[pair]) * p.H + col) * kRank;
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row));
  }
}

template <bool kFp16, int kRank, int kCols>
__global__ void __launch_bounds__(kCols) cake_expand_kernel(const CakeParams p) {
  constexpr int kGroups = kRank / 8;
  __shared__ ExpandShared<kRank, kCols> sh;
  const int tid = threadIdx.x;
  const int64_t t = blockIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kCols + tid;
  // Inputs only before the dependency wait: LoRA, implicit positions, B prefetch.
  const int64_t l = p.lora_indices[t];
  prefetch_contiguous_b<kRank>(p, t, l, col);
  const bool top2 = p.P == 2 * p.T;
  bool at0 = false, at1 = false;
  if (tid == 0 && top2) {
    at0 = p.sorted_token_ids[2 * t] == t;
    at1 = p.sorted_token_ids[2 * t + 1] == t;
  }
  pdl_wait();
  const RouteIndex ri{p.route_index, p.T};
  uint32_t parity = 0, count = 0, launch = 0;
  if (tid == 0) {
    // Independent loads, one round trip: both bases, then pick by parity.
    // NOTE: base_{1-parity} may be being rewritten by column block 0 of this token; its value is
    // discarded, only base_parity (stable during this launch) is used.
    parity = load_word(ri.parity()) & 1u;
    count = load_word(ri.count(t));
    const uint32_t base_even = load_word(ri.base(t, 0));
    const uint32_t base_odd = load_word(ri.base(t, 1));
    if (t == 0 && blockIdx.y == 0) launch = load_word(ri.launch_counter());
    sh.count = 0;
    sh.mode = kNoRoutes;
    const uint32_t published = count - (parity != 0 ? base_odd : base_even);
    if (l >= 0) find_routes<kRank, kCols>(p, t, published, at0, at1, sh);
  }
  __syncthreads();
  float acc[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) acc[g] = 0.0f;
  const int mode = sh.mode;
  if (mode == kRouteList) {
    expand_routes<kFp16, kRank, kCols>(p, l, sh.routes, sh.count, col, sh, acc);
  } else if (mode == kSerialScan) {
    expand_serial_scan<kFp16, kRank, kCols>(p, t, l, col, sh, acc);
  }
  if (col < p.H) {
    p.y[t * p.y_row_stride + col] = butterfly_lane0<kGroups>(acc);
  }
  // §3.3 epilogue: only the other parity's base changes, so sibling CTAs of this token that still
  // read base_parity are undisturbed; token 0 advances the launch counter.
  if (tid == 0 && blockIdx.y == 0) {
    *ri.base(t, parity ^ 1u) = count;
    if (t == 0) *ri.launch_counter() = launch + 1u;
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
