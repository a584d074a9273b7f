// Cake generic expand (spec §4.3): CTA shapes, schedules and route discovery. Thread 0 or warp 0
// finds the routes of token t (the pairs whose sorted_token_ids entry is t) from the route index
// (§3.3) or by scanning the inputs, and stages them ascending in shared memory with each route's
// weight and B offset; expand_cake.cuh runs the FMAs over that list.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "bgmv/route_index.cuh"
#include "ptx/cache_hints.cuh"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace dev {

/// Pairs one warp scans per round; also the capacity of the staged route list. With P at most
/// this the routes are found before `griddepcontrol.wait` from inputs only (no route index).
constexpr int kScanPairs = 256;
/// Routes past the register-prefetched first batch whose B rows are pulled into L2 pre-wait.
constexpr int kL2PrefetchRoutes = 12;

enum RouteMode : int { kNoRoutes = 0, kRouteList = 1, kSerialScan = 2, kStagedPair = 3 };

/// What an expand instance loads before `griddepcontrol.wait` besides the LoRA (one instance per
/// mode; the bits never depend on it):
/// - kPrewaitBatch: early path (P <= kScanPairs): the route list and the first batch of B in
///   registers, the next kL2PrefetchRoutes routes' B into L2; else the contiguous pair's B into L2.
/// - kPrewaitPair: P > kScanPairs and P == 2T: pairs 2t, 2t + 1 (weights, B offsets, first batch
///   of B in registers) when both hold t; the route index after the wait only confirms nothing
///   else was published for t (top-2 contiguous layout at T >= 129; measured -10-15 % at T 256 /
///   512 on SM90, bench/results/*_d23c9a3_*).
enum Prewait : int { kPrewaitBatch = 0, kPrewaitPair = 1 };

/// CTA shape of one expand instance: kThreads threads, each owning kItems (column, lane) slots
/// spaced kThreads / G columns apart, and loading kBatch routes' B vectors before its FMAs.
template <int kRankArg, int kThreadsArg, int kItemsArg, int kBatchArg>
struct ExpandShape {
  static constexpr int kRank = kRankArg;
  static constexpr int kThreads = kThreadsArg;
  static constexpr int kItems = kItemsArg;
  static constexpr int kBatch = kBatchArg;
  static constexpr int kGroups = kRank / 8;              // lanes per column
  static constexpr int kColStride = kThreads / kGroups;  // columns per item row
  static constexpr int kCols = kItems * kColStride;      // columns per CTA
  static_assert(kGroups >= 1 && kGroups <= 8 && kWarp % kGroups == 0, "rank 8..64");
  static_assert(kThreads % kWarp == 0 && kBatch >= 1, "whole warps");
};

/// Routes per batch of the wide schedule: 2 at ranks 8 / 16 (so the kernel fits 64 registers,
/// 8 CTAs per SM), else 8 B vectors in flight per thread (8 / G routes, at least 1).
constexpr int wide_expand_batch(int rank) {
  return rank / 8 <= 2 ? 2 : (8 / (rank / 8) < 1 ? 1 : 8 / (rank / 8));
}
/// The generic expand schedules (CakeParams::schedule_id; expand_launch.cuh says where each runs).
/// 0, narrow: 64 threads, one (column, lane) slot each, 4 routes per batch.
template <int kRank>
using NarrowExpand = ExpandShape<kRank, 64, 1, 4>;
/// 1, wide: 128 threads x 128 columns, G slots per thread.
template <int kRank>
using WideExpand = ExpandShape<kRank, 128, kRank / 8, wide_expand_batch(kRank)>;
/// 2, decode: 128 threads, one (column, lane) slot each, 8 routes per batch.
template <int kRank>
using DecodeExpand = ExpandShape<kRank, 128, 1, 8>;

/// Shared state of one expand CTA: the ascending route list with each route's weight and the
/// element offset of B[l, e].
struct ExpandShared {
  int32_t routes[kScanPairs];
  float weights[kScanPairs];
  int64_t b_offset[kScanPairs];
  int count;
  int mode;
};

/// Thread 0, after the wait: the routes of token t from the route index (§3.3 steps 1-2),
/// ascending in shared memory; kSerialScan when more than 16 were published.
/// `at0` / `at1`: pair 2t / 2t+1 holds t with P == 2T (implicit, never published).
CAKEMOE_DEVICE void find_routes(const CakeParams& p, int64_t t, uint32_t published, bool at0,
                                bool at1, ExpandShared& sh) {
  const RouteIndex ri{p.route_index, p.T};
  // NOTE: the contiguous fast path also needs an empty published list: with P == 2T a token may
  // sit at 2t, 2t+1 and still own a route elsewhere (another token then owns fewer).
  if (published > static_cast<uint32_t>(kSlotsPerToken)) {
    sh.mode = kSerialScan;
    return;
  }
  uint32_t slot[kSlotsPerToken];
#pragma unroll
  for (int i = 0; i < kSlotsPerToken; ++i) {  // independent loads: one round trip
    slot[i] = static_cast<uint32_t>(i) < published ? load_word(ri.slots(t) + i) : 0u;
  }
  int n = 0;
#pragma unroll
  for (int i = 0; i < kSlotsPerToken; ++i) {
    if (static_cast<uint32_t>(i) < published) sh.routes[n++] = static_cast<int32_t>(slot[i]);
  }
  if (at0) sh.routes[n++] = static_cast<int32_t>(2 * t);
  if (at1) sh.routes[n++] = static_cast<int32_t>(2 * t + 1);
  for (int i = 1; i < n; ++i) {  // insertion sort of at most 18 pair ids
    const int32_t v = sh.routes[i];
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

/// Warp 0: the pairs p in [start, start + kScanPairs) with sorted_token_ids[p] == t, ascending,
/// into sh.routes; lane 0 writes sh.count. Reads inputs only (legal before the PDL wait).
CAKEMOE_DEVICE void scan_routes(const CakeParams& p, int64_t t, int64_t start, ExpandShared& sh) {
  constexpr int kPerLane = kScanPairs / kWarp;
  const int lane = threadIdx.x % kWarp;
  int64_t ids[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {  // all loads in flight before the first ballot
    const int64_t pair = start + i * kWarp + lane;
    ids[i] = pair < p.P ? p.sorted_token_ids[pair] : -1;
  }
  int n = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const bool match = ids[i] == t;  // NOTE: t is in [0, T), so padding ids never match
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, match);
    if (match) {
      sh.routes[n + __popc(ballot & ((1u << lane) - 1u))] =
          static_cast<int32_t>(start + i * kWarp + lane);
    }
    n += __popc(ballot);
  }
  if (lane == 0) sh.count = n;
}

/// Weight and B[l, e] offset of routes [0, n) (CTA-wide; the caller syncs before and after).
template <int kRank, int kThreads>
CAKEMOE_DEVICE void route_meta(const CakeParams& p, int64_t l, int n, ExpandShared& sh) {
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const int64_t pair = sh.routes[j];
    sh.weights[j] = p.topk_weights[pair];
    sh.b_offset[j] = (l * p.E + p.expert_ids[pair]) * p.H * kRank;
  }
}

/// The early path's whole route list in one dependent trip (P <= kScanPairs, warp 0): every
/// pair's token, expert and weight are loaded together (the experts and weights of other tokens'
/// pairs are loaded for nothing, 12 bytes a pair), so the list, the weights and the B offsets
/// (scan_routes + route_meta) are in shared memory one trip after the LoRA, which this trip
/// also overlaps. `l` < 0: no routes. Reads inputs only (legal before the PDL wait).
template <int kRank>
CAKEMOE_DEVICE void scan_routes_meta(const CakeParams& p, int64_t t, int64_t l, ExpandShared& sh) {
  constexpr int kPerLane = kScanPairs / kWarp;
  const int lane = threadIdx.x % kWarp;
  int64_t ids[kPerLane], experts[kPerLane];
  float weights[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t pair = i * kWarp + lane;
    const bool in = pair < p.P;
    ids[i] = in ? p.sorted_token_ids[pair] : -1;
    experts[i] = in ? p.expert_ids[pair] : 0;
    weights[i] = in ? p.topk_weights[pair] : 0.0f;
  }
  int n = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const bool match = l >= 0 && ids[i] == t;  // NOTE: t is in [0, T): padding never matches
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, match);
    if (match) {
      const int j = n + __popc(ballot & ((1u << lane) - 1u));
      sh.routes[j] = static_cast<int32_t>(i * kWarp + lane);
      sh.weights[j] = weights[i];
      sh.b_offset[j] = (l * p.E + experts[i]) * p.H * kRank;
    }
    n += __popc(ballot);
  }
  if (lane == 0) sh.count = n;
}

/// Thread 0, before the wait, contiguous layout (P == 2T): whether pairs 2t and 2t + 1 hold t
/// (`at0`, `at1`, as the route-index path needs them), and when both do and t has a LoRA, the
/// list {2t, 2t + 1} with its weights and B offsets in shared memory (count 2; else 0). One trip:
/// tokens, experts and weights of both pairs load together (the LoRA is already known).
template <int kRank>
CAKEMOE_DEVICE void stage_contiguous_pair(const CakeParams& p, int64_t t, int64_t l,
                                          ExpandShared& sh, bool* at0, bool* at1) {
  int64_t ids[2], experts[2];
  float weights[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    ids[j] = p.sorted_token_ids[2 * t + j];
    experts[j] = p.expert_ids[2 * t + j];
    weights[j] = p.topk_weights[2 * t + j];
  }
  *at0 = ids[0] == t;
  *at1 = ids[1] == t;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    sh.routes[j] = static_cast<int32_t>(2 * t + j);
    sh.weights[j] = weights[j];
    sh.b_offset[j] = (l * p.E + experts[j]) * p.H * kRank;
  }
  sh.count = *at0 && *at1 && l >= 0 ? 2 : 0;
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
