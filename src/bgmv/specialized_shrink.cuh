// Specialized BGMV shrink (spec §7): hidden H and rank 32 fixed at compile time. Same grid
// (P, 4, splits), CTA shape and canonical FP32 order (spec §3.2) as the generic shrink
// (shrink_cake.cuh), so the bits are the same: thread j owns elements tile*1024 + 8j .. 8j+7,
// fma chains tile by tile over the split's range, warp XOR butterflies, warp sums 0..3, split
// partials in split order. What differs: every tile of the split is loaded straight into
// registers before the first FMA (no cp.async ring, no shared staging), loops are unrolled over
// the compile-time tile count, and the K tail of H = 2688 is a compile-time predicate.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "bgmv/route_index.cuh"
#include "bgmv/shrink_cake.cuh"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kSpecializedRank = 32;

/// Whether thread `tid` owns a chunk inside H in tile `tile` (H % 8 == 0: all or nothing).
template <int kHidden>
CAKEMOE_DEVICE bool specialized_chunk_in(int tile, int tid) {
  return tile * kShrinkTile + 8 * tid < kHidden;
}

/// This thread's x and 8 A-row chunks of the tiles in [t0, t1), all issued before any use.
template <int kHidden, int kTiles>
CAKEMOE_DEVICE void specialized_shrink_load(const uint16_t* x_row, const uint16_t* a_rows, int t0,
                                            int t1, uint4 (&xv)[kTiles],
                                            uint4 (&av)[kTiles][kRankTile]) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    if (tile < t0 || tile >= t1 || !specialized_chunk_in<kHidden>(tile, tid)) continue;
    const int k = tile * kShrinkTile + 8 * tid;
    xv[tile] = __ldg(reinterpret_cast<const uint4*>(x_row + k));
#pragma unroll
    for (int i = 0; i < kRankTile; ++i) {
      av[tile][i] = __ldg(reinterpret_cast<const uint4*>(a_rows + i * kHidden + k));
    }
  }
}

/// The per-thread fma chains over tiles [t0, t1) ascending, elements 0..7 ascending (spec §3.2);
/// chunks past H are skipped, as the reference skips them.
template <bool kFp16, int kHidden, int kTiles>
CAKEMOE_DEVICE void specialized_shrink_fma(int t0, int t1, const uint4 (&xv)[kTiles],
                                           const uint4 (&av)[kTiles][kRankTile],
                                           float (&acc)[kRankTile]) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    if (tile < t0 || tile >= t1 || !specialized_chunk_in<kHidden>(tile, tid)) continue;
    shrink_fma_chunk<kFp16, kRankTile>(xv[tile], av[tile], acc);
  }
}

// NOTE: 3 CTAs of 128 threads per SM (up to 170 registers): the whole split's operands (at most
// 3 tiles x 9 chunks = 108 registers) stay in flight per thread, as the generic deep ring does.
template <bool kFp16, int kHidden>
__global__ void __launch_bounds__(kShrinkThreads, 3) specialized_shrink_kernel(const CakeParams p) {
  constexpr int kRank = kSpecializedRank;
  constexpr int kTiles = (kHidden + kShrinkTile - 1) / kShrinkTile;
  __shared__ float warp_sums[kShrinkThreads / kWarp][kRankTile];
  __shared__ int last_split;
  // A no-op unless launched as a programmatic dependent (as the generic shrink).
  ptx::griddep_wait();
  if (p.pdl_mode == 1) ptx::griddep_launch_dependents();
  const int tid = threadIdx.x;
  const int rb = blockIdx.y;
  const int z = blockIdx.z;
  const int64_t pair = blockIdx.x;
  const RouteIndex ri{p.route_index, p.T};
  if (pair == 0 && rb == 0 && z == 0 && tid == 0) {
    *ri.parity() = load_word(ri.launch_counter()) & 1u;
  }
  const PairRoute route = load_pair_route(p, pair);  // one trip at T <= 32
  const int64_t t = route.t, l = route.l, e = route.e;
  uint16_t* out = static_cast<uint16_t*>(p.shrink_out) + pair * kRank + rb * kRankTile;
  if (l < 0) {  // padding or no LoRA: a zero row, never published
    if (z == 0 && tid < kRankTile) out[tid] = 0;
    if (p.pdl_mode == 2) ptx::griddep_launch_dependents();
    return;
  }
  const bool publisher = rb == 0 && z == 0 && tid == 0 && !implicit_pair(pair, t, p.P, p.T);
  PublishTicket ticket{};
  if (publisher) ticket = publish_begin(ri, t);

  // Load every tile of this split, then the fma chains.
  const uint16_t* x_row = static_cast<const uint16_t*>(p.x) + t * kHidden;
  const uint16_t* a_rows =
      static_cast<const uint16_t*>(p.lora_a) + ((l * p.E + e) * kRank + rb * kRankTile) * kHidden;
  const int per_split = (kTiles + p.splits - 1) / p.splits;
  const int t0 = min(z * per_split, kTiles);
  const int t1 = min((z + 1) * per_split, kTiles);
  uint4 xv[kTiles];
  uint4 av[kTiles][kRankTile];
  specialized_shrink_load<kHidden, kTiles>(x_row, a_rows, t0, t1, xv, av);
  float acc[kRankTile];
#pragma unroll
  for (int i = 0; i < kRankTile; ++i) acc[i] = 0.0f;
  specialized_shrink_fma<kFp16, kHidden, kTiles>(t0, t1, xv, av, acc);
  if (p.pdl_mode == 2) ptx::griddep_launch_dependents();

  // Same reduction and split finish as the generic shrink (the bits match).
  shrink_reduce_store<kFp16, kRank, kRankTile>(p, ri, pair, rb, z, acc, warp_sums, &last_split,
                                               out);
  if (publisher) publish_end(ri, ticket, t, pair);
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
