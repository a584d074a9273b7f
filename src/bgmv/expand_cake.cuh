// Cake generic expand (spec §4.3): token-owned, grid (T, ceil(H / cols)). Lane-cooperative: the
// G = R/8 lanes of a column each hold one rank-group accumulator of §3.2 (lane g: ranks
// 8g..8g+7), so one warp load reads whole contiguous B rows; the lanes fold with the fixed XOR
// butterfly and lane 0 stores. Route discovery and the route index epilogue follow §3.3.
// Shapes, schedules and route discovery: expand_routes.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "bgmv/expand_routes.cuh"
#include "bgmv/route_index.cuh"
#include "ptx/cache_hints.cuh"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace dev {

/// Element e (0..7) of a 16-byte vector of 16-bit values, widened (as unpack8 does).
template <bool kFp16>
CAKEMOE_DEVICE float widen_half(const uint4& v, int e) {
  const uint32_t word = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
  return widen<kFp16>(static_cast<uint16_t>(e % 2 == 0 ? word & 0xFFFFu : word >> 16));
}

/// The thread's (column, lane) slots of one CTA (runtime H; specialized_expand.cuh has the
/// compile-time form).
template <class Shape>
struct ExpandLanes {
  int g;         // rank group of this lane
  int64_t col0;  // column of item 0; item i is col0 + i * Shape::kColStride
  int64_t H;

  static CAKEMOE_DEVICE ExpandLanes make(int g, int64_t col0, int64_t hidden) {
    return ExpandLanes{g, col0, hidden};
  }
  CAKEMOE_DEVICE int64_t col(int i) const { return col0 + i * Shape::kColStride; }
  CAKEMOE_DEVICE bool in(int i) const { return col(i) < H; }
};

/// B vectors (ranks 8g..8g+7) of routes [j0, j0 + kBatch) for every item (needs j0 < n).
/// NOTE: the loads are unconditional (a route past n or a column past H is clamped to a valid one
/// and its value is never used), so the compiler cannot sink them behind the previous FMAs.
template <int kRank, int kItems, int kBatch, class Lanes>
CAKEMOE_DEVICE void load_b(const uint16_t* lora_b, const ExpandShared& sh, int j0, int n,
                           const Lanes& ln, uint4 (&bv)[kBatch][kItems]) {
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const uint16_t* b = lora_b + sh.b_offset[min(j0 + j, n - 1)] + 8 * ln.g;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      bv[j][i] = __ldg(reinterpret_cast<const uint4*>(b + min(ln.col(i), ln.H - 1) * kRank));
    }
  }
}

/// Pulls the B rows of routes [j0, j1) of every item into L2 (inputs only; no registers).
template <int kRank, int kItems, class Lanes>
CAKEMOE_DEVICE void prefetch_b_l2(const uint16_t* lora_b, const ExpandShared& sh, int j0, int j1,
                                  const Lanes& ln) {
  for (int j = j0; j < j1; ++j) {
    const uint16_t* b = lora_b + sh.b_offset[j] + 8 * ln.g;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (ln.in(i)) ptx::prefetch_global_l2(b + ln.col(i) * kRank);
    }
  }
}

/// One batch, routes [j0, j0 + kBatch) of sh with their B vectors in bv: loads the shrink rows
/// (L2), then the §3.2 per-route arithmetic: part = fma chain over the lane's 8 ranks from 0,
/// then acc = fma(part, w, acc) in ascending route order. Slots past n leave acc untouched.
template <bool kFp16, int kRank, int kItems, int kBatch, class Lanes>
CAKEMOE_DEVICE void expand_batch(const uint16_t* shrink, const ExpandShared& sh, int j0, int n,
                                 const Lanes& ln, const uint4 (&bv)[kBatch][kItems],
                                 float (&acc)[kItems]) {
  uint4 sv[kBatch];
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const int64_t pair = sh.routes[min(j0 + j, n - 1)];
    sv[j] = __ldcg(reinterpret_cast<const uint4*>(shrink + pair * kRank) + ln.g);
  }
  // The batch's fma chains interleaved step by step (each chain keeps its own order), so the
  // first FMAs already need every load of the batch.
  float part[kBatch][kItems];
#pragma unroll
  for (int r = 0; r < 8; r += 2) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const float s0 = widen_half<kFp16>(sv[j], r), s1 = widen_half<kFp16>(sv[j], r + 1);
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const float b0 = widen_half<kFp16>(bv[j][i], r), b1 = widen_half<kFp16>(bv[j][i], r + 1);
        part[j][i] = fmaf(s0, b0, r == 0 ? 0.0f : part[j][i]);
        part[j][i] = fmaf(s1, b1, part[j][i]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const bool route = j0 + j < n;  // uniform
    const float w = sh.weights[min(j0 + j, n - 1)];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const float next = fmaf(part[j][i], w, acc[i]);
      acc[i] = route ? next : acc[i];
    }
  }
}

/// Accumulates routes [0, n) of sh (ascending), kBatch routes' loads at a time.
/// `b_ready`: bv already holds routes [0, kBatch) (loaded before the PDL wait).
template <bool kFp16, int kRank, int kItems, int kBatch, class Lanes>
CAKEMOE_DEVICE void expand_routes(const CakeParams& p, const ExpandShared& sh, int n,
                                  const Lanes& ln, bool b_ready, uint4 (&bv)[kBatch][kItems],
                                  float (&acc)[kItems]) {
  const uint16_t* shrink = static_cast<const uint16_t*>(p.shrink_out);
  const uint16_t* lora_b = static_cast<const uint16_t*>(p.lora_b);
  int j0 = 0;
  if (b_ready && n > 0) {
    expand_batch<kFp16, kRank, kItems, kBatch>(shrink, sh, 0, n, ln, bv, acc);
    j0 = kBatch;
  }
  for (; j0 < n; j0 += kBatch) {
    load_b<kRank, kItems, kBatch>(lora_b, sh, j0, n, ln, bv);
    expand_batch<kFp16, kRank, kItems, kBatch>(shrink, sh, j0, n, ln, bv, acc);
  }
}

/// Pulls this thread's B rows of the contiguous routes 2t, 2t+1 into L2 while the shrink still
/// runs (PDL) or while thread 0 discovers the routes (P above the pre-wait scan limit).
template <int kRank, int kItems, class Lanes>
CAKEMOE_DEVICE void prefetch_contiguous_b(const CakeParams& p, int64_t t, int64_t l,
                                          const Lanes& ln) {
  if (l < 0 || p.P != 2 * p.T) return;
  const uint16_t* lora_b = static_cast<const uint16_t*>(p.lora_b);
  for (int64_t pair = 2 * t; pair < 2 * t + 2; ++pair) {
    if (p.sorted_token_ids[pair] != t) continue;
    const uint16_t* b = lora_b + (l * p.E + p.expert_ids[pair]) * p.H * kRank + 8 * ln.g;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (ln.in(i)) ptx::prefetch_global_l2(b + ln.col(i) * kRank);
    }
  }
}

// NOTE: the minimum of 512 threads per SM lets ptxas keep a whole batch's loads in flight (with
// no occupancy hint it interleaves them with the previous route's FMAs); at most 128 registers.
// NOTE: ranks 8/16 ask for 8 CTAs of 128 threads per SM (64 registers): at T >= 256 the
// route-discovery chain of each CTA needs the occupancy (SM90: 4 CTAs/SM cost 20-30 % at rank 16).
// The decode schedule's 8-route batch (116 registers) keeps 512 threads per SM at every rank.
// NOTE: `Lanes` is ExpandLanes (runtime H) or SpecializedLanes (compile-time H, spec §7): the
// specialized expand is this body with H fixed, so both variants share every instruction of the
// canonical order.
// NOTE: `kPrewait` is chosen by the launcher from P and T; the pair instance handles every input
// (without the contiguous pair it runs the route-index path as before).
template <bool kFp16, class Shape, Prewait kPrewait, class Lanes = ExpandLanes<Shape>>
__global__ void __launch_bounds__(Shape::kThreads,
                                  Shape::kBatch >= 8
                                      ? 512 / Shape::kThreads
                                      : (Shape::kRank <= 16 ? 1024 : 512) / Shape::kThreads)
    cake_expand_kernel(const CakeParams p) {
  constexpr int kRank = Shape::kRank, kThreads = Shape::kThreads;
  constexpr int kItems = Shape::kItems, kBatch = Shape::kBatch;
  constexpr int kGroups = Shape::kGroups;
  __shared__ ExpandShared sh;
  const int tid = threadIdx.x;
  const int64_t t = blockIdx.x;
  const Lanes ln = Lanes::make(
      tid % kGroups, static_cast<int64_t>(blockIdx.y) * Shape::kCols + tid / kGroups, p.H);
  const uint16_t* lora_b = static_cast<const uint16_t*>(p.lora_b);
  float acc[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) acc[i] = 0.0f;
  uint4 bv[kBatch][kItems];

  // Before the dependency wait: inputs only (LoRA, routes by scan, B of the first batch).
  const int64_t l = p.lora_indices[t];
  const bool early = p.P <= kScanPairs;
  bool at0 = false, at1 = false;
  if (early) {
    if (tid < kWarp) scan_routes_meta<kRank>(p, t, l, sh);
    __syncthreads();
    const int n = sh.count;
    if (n > 0) load_b<kRank, kItems, kBatch>(lora_b, sh, 0, n, ln, bv);
    prefetch_b_l2<kRank, kItems>(lora_b, sh, kBatch, min(n, kBatch + kL2PrefetchRoutes), ln);
  } else if (kPrewait == kPrewaitPair && p.P == 2 * p.T) {
    // Contiguous top-2 layout: when pairs 2t and 2t + 1 both hold t, their weights, B offsets and
    // the first batch of B are ready before the wait (sh.count 2, else 0).
    if (tid == 0) stage_contiguous_pair<kRank>(p, t, l, sh, &at0, &at1);
    __syncthreads();
    if (sh.count == 2) load_b<kRank, kItems, kBatch>(lora_b, sh, 0, 2, ln, bv);
    __syncthreads();  // every read of the staged list before thread 0 may rewrite it (racecheck)
  } else {
    prefetch_contiguous_b<kRank, kItems>(p, t, l, ln);
    if (tid == 0 && p.P == 2 * p.T) {
      at0 = p.sorted_token_ids[2 * t] == t;
      at1 = p.sorted_token_ids[2 * t + 1] == t;
    }
  }
  ptx::griddep_wait();

  // Route index words (§3.3): read by every CTA, used by the epilogue of column block 0.
  const RouteIndex ri{p.route_index, p.T};
  uint32_t parity_word = 0, count = 0, launch = 0;
  if (tid == 0) {
    // Independent loads, one round trip: both bases, then pick by parity.
    // NOTE: base_{1-parity} may be being rewritten by column block 0 of this token; its value is
    // discarded, only base_parity (stable during this launch) is used.
    // NOTE: the word stays raw until it is needed: with the scanned list (early) nothing uses it
    // before the epilogue, and `& 1u` here made warp 0 wait one L2 trip before its shrink-row
    // loads, a second dependent trip after the PDL wait that the other warps did not have.
    parity_word = load_word(ri.parity());
    count = load_word(ri.count(t));
    const uint32_t base_even = load_word(ri.base(t, 0));
    const uint32_t base_odd = load_word(ri.base(t, 1));
    if (t == 0 && blockIdx.y == 0) launch = load_word(ri.launch_counter());
    if (!early) {
      const uint32_t parity = parity_word & 1u;
      if constexpr (kPrewait == kPrewaitPair) {
        const uint32_t published = count - (parity != 0 ? base_odd : base_even);
        if (p.P == 2 * p.T && sh.count == 2 && published == 0) {
          sh.mode = kStagedPair;  // exactly {2t, 2t + 1}: the staged list and B registers hold
        } else {
          sh.count = 0;
          sh.mode = kNoRoutes;
          if (l >= 0) find_routes(p, t, published, at0, at1, sh);
        }
      } else {
        sh.count = 0;
        sh.mode = kNoRoutes;
        const uint32_t published = count - (parity != 0 ? base_odd : base_even);
        if (l >= 0) find_routes(p, t, published, at0, at1, sh);
      }
    }
  }

  // Accumulate: the scanned list, the indexed list, or the chunked serial scan (§3.3 step 3).
  if (early) {
    expand_routes<kFp16, kRank, kItems, kBatch>(p, sh, sh.count, ln, true, bv, acc);
  } else {
    __syncthreads();
    const int mode = sh.mode;
    if (kPrewait == kPrewaitPair && mode == kStagedPair) {
      expand_routes<kFp16, kRank, kItems, kBatch>(p, sh, 2, ln, true, bv, acc);
    } else if (mode == kRouteList) {
      const int n = sh.count;
      route_meta<kRank, kThreads>(p, l, n, sh);
      __syncthreads();
      expand_routes<kFp16, kRank, kItems, kBatch>(p, sh, n, ln, false, bv, acc);
    } else if (mode == kSerialScan) {
      for (int64_t start = 0; start < p.P; start += kScanPairs) {
        if (tid < kWarp) scan_routes(p, t, start, sh);
        __syncthreads();
        const int n = sh.count;
        route_meta<kRank, kThreads>(p, l, n, sh);
        __syncthreads();
        expand_routes<kFp16, kRank, kItems, kBatch>(p, sh, n, ln, false, bv, acc);
        __syncthreads();  // the next chunk overwrites the list
      }
    }
  }

  // Lane fold (§3.2): XOR butterfly, offsets G/2..1. Lane 0 adds the same operands in the same
  // order as the reference's serial fold; every lane of the warp takes part in each shuffle.
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    float v = acc[i];
#pragma unroll
    for (int off = kGroups / 2; off >= 1; off /= 2) v = v + __shfl_xor_sync(0xFFFFFFFFu, v, off);
    if (ln.g == 0 && ln.in(i)) p.y[t * p.y_row_stride + ln.col(i)] = v;
  }
  // §3.3 epilogue: only the other parity's base changes, so sibling CTAs of this token that still
  // read base_parity are undisturbed; token 0 advances the launch counter.
  if (tid == 0 && blockIdx.y == 0) {
    *ri.base(t, (parity_word & 1u) ^ 1u) = count;
    if (t == 0) *ri.launch_counter() = launch + 1u;
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
