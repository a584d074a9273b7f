// Cake generic shrink (spec §4.1, §4.2): one CTA = one pair x 8 rank rows x one hidden split,
// 128 threads, K streamed in 1024-wide tiles through a cp.async ring (2 or 3 stages) or through
// registers: kRegisters up to 4 tiles at once, kRegistersOneTile one tile at a time (few
// registers, no shared memory: many CTAs per SM). The half / quarter blocks are kRegisters over 4
// and 2 rank rows: 2x / 4x the CTAs, each loading 1/2 / 1/4 of the A bytes, for grids far below
// one CTA per SM. Canonical FP32 order of §3.2 (docs/decisions/bgmv.md); route publishing of
// §3.3 by the split-0, rank-block-0 CTA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "bgmv/route_index.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kShrinkThreads = 128;
constexpr int kRankTile = 8;
constexpr int kShrinkTile = kShrinkThreads * 8;  // K elements per tile
constexpr int kShrinkSlots = 1 + kRankTile;      // x chunk + 8 A-row chunks per thread and stage

/// What a shrink kind compiles to: cp.async ring stages (0: through registers), k tiles per
/// register trip, rank rows per CTA.
struct ShrinkForm {
  int ring_stages;
  int register_tiles;
  int rows;
};
constexpr ShrinkForm shrink_form(ShrinkKind kind) {
  switch (kind) {
    case ShrinkKind::kRing2Stage:
      return {2, 0, kRankTile};
    case ShrinkKind::kRing3Stage:
      return {3, 0, kRankTile};
    case ShrinkKind::kRegisters:
      return {0, 4, kRankTile};
    case ShrinkKind::kRegistersOneTile:
      return {0, 1, kRankTile};
    case ShrinkKind::kRegistersHalfBlock:
      return {0, 4, kRankTile / 2};
    case ShrinkKind::kRegistersQuarterBlock:
      return {0, 4, kRankTile / 4};
  }
  return {0, 0, 0};
}

/// Dynamic shared memory of the ring: per stage, per thread, 9 chunks of 16 bytes (none for the
/// register kinds).
constexpr int shrink_smem_bytes(int ring_stages) {
  return ring_stages > 0 ? ring_stages * kShrinkSlots * kShrinkThreads * 16 : 0;
}

/// Issues the cp.async copies of tile `tile` into ring stage `stage` (only this thread's chunks).
CAKEMOE_DEVICE void shrink_issue_tile(uint4* ring, int stage, int64_t tile, int64_t hidden,
                                      const uint16_t* x_row, const uint16_t* a_rows) {
  const int tid = threadIdx.x;
  const int64_t k = tile * kShrinkTile + 8 * tid;
  const bool in = k < hidden;  // NOTE: H % 8 == 0, so a chunk is all inside or all outside
  uint4* base = ring + stage * kShrinkSlots * kShrinkThreads + tid;
  ptx::cp_async_16(base, in ? x_row + k : x_row, in);
#pragma unroll
  for (int i = 0; i < kRankTile; ++i) {
    const uint16_t* src = a_rows + i * hidden;
    ptx::cp_async_16(base + (1 + i) * kShrinkThreads, in ? src + k : src, in);
  }
}

/// Per-thread fma chains of one split over tiles [t0, t1) (zero-filled tail = reference padding).
template <bool kFp16, int kStages>
CAKEMOE_DEVICE void shrink_tile_loop(uint4* ring, int64_t t0, int64_t t1, int64_t hidden,
                                     const uint16_t* x_row, const uint16_t* a_rows, float* acc) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (t0 + s < t1) shrink_issue_tile(ring, s, t0 + s, hidden, x_row, a_rows);
    ptx::cp_async_commit();
  }
  for (int64_t tile = t0; tile < t1; ++tile) {
    // The barrier retires every read of the stage that the next issue overwrites.
    __syncthreads();
    const int64_t ahead = tile + kStages - 1;
    if (ahead < t1) {
      shrink_issue_tile(ring, static_cast<int>((ahead - t0) % kStages), ahead, hidden, x_row,
                        a_rows);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<kStages - 1>();
    const uint4* stage =
        ring + static_cast<int>((tile - t0) % kStages) * kShrinkSlots * kShrinkThreads + tid;
    float xf[8];
    unpack8<kFp16>(stage[0], xf);
#pragma unroll
    for (int i = 0; i < kRankTile; ++i) {
      float af[8];
      unpack8<kFp16>(stage[(1 + i) * kShrinkThreads], af);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i] = fmaf(xf[e], af[e], acc[i]);
    }
  }
  ptx::cp_async_wait<0>();
}

/// One 16-byte chunk of the canonical fma chains (spec §3.2): acc[i] += x[e] * a[i][e] for the
/// chunk's 8 elements in order, for each of the CTA's kRows rank rows.
template <bool kFp16, int kRows>
CAKEMOE_DEVICE void shrink_fma_chunk(const uint4& x, const uint4 (&a)[kRows], float* acc) {
  float xf[8];
  unpack8<kFp16>(x, xf);
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    float af[8];
    unpack8<kFp16>(a[i], af);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i] = fmaf(xf[e], af[e], acc[i]);
  }
}

/// The register kinds: the same per-thread fma chains with no ring. x and A of kTiles k tiles
/// (ShrinkForm::register_tiles) go to registers before the first FMA (H <= 4096 in one trip).
/// Chunks past H are skipped: bitwise the ring's zero-filled FMAs (fma(0, 0, acc) == acc for acc !=
/// -0, and acc starts at +0).
template <bool kFp16, int kTiles, int kRows>
CAKEMOE_DEVICE void shrink_tile_registers(int64_t t0, int64_t t1, int64_t hidden,
                                          const uint16_t* x_row, const uint16_t* a_rows,
                                          float* acc) {
  const int64_t lane_k = 8 * static_cast<int64_t>(threadIdx.x);
  for (int64_t base = t0; base < t1; base += kTiles) {
    uint4 xv[kTiles], av[kTiles][kRows];
#pragma unroll
    for (int d = 0; d < kTiles; ++d) {
      const int64_t k = (base + d) * kShrinkTile + lane_k;
      if (base + d >= t1 || k >= hidden) continue;
      xv[d] = *reinterpret_cast<const uint4*>(x_row + k);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        av[d][i] = *reinterpret_cast<const uint4*>(a_rows + i * hidden + k);
      }
    }
#pragma unroll
    for (int d = 0; d < kTiles; ++d) {
      if (base + d >= t1 || (base + d) * kShrinkTile + lane_k >= hidden) continue;
      shrink_fma_chunk<kFp16, kRows>(xv[d], av[d], acc);
    }
  }
}

/// The end of a shrink CTA (spec §3.2, §4.2): warp XOR butterflies of the 8 accumulators, the 4
/// warp sums in warp order from 0.0f, then the row: stored directly with one split, else through
/// the ordered last-arrival reduction of the split partials with a self-resetting ticket. Every
/// thread of the 128-thread CTA calls it; `warp_sums` and `last_split` are its shared memory.
template <bool kFp16, int kRank, int kRows>
CAKEMOE_DEVICE void shrink_reduce_store(const CakeParams& p, const RouteIndex& ri, int64_t pair,
                                        int rb, int z, const float (&acc)[kRows],
                                        float (&warp_sums)[kShrinkThreads / kWarp][kRankTile],
                                        int* last_split, uint16_t* out) {
  const int tid = threadIdx.x;
  const int warp = tid / kWarp;
  // The kRows XOR butterflies (16 .. 1) at once, bitwise: lanes (32 / kRows) i .. end with rank
  // row i.
  float v[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) v[i] = acc[i];
  const float warp_sum = warp_reduce_scatter<kRows>(v);
  constexpr int kLanesPerRow = kWarp / kRows;
  if (tid % kLanesPerRow == 0) warp_sums[warp][(tid % kWarp) / kLanesPerRow] = warp_sum;
  __syncthreads();
  float sum = 0.0f;
  if (tid < kRows) {
#pragma unroll
    for (int w = 0; w < kShrinkThreads / kWarp; ++w) sum = sum + warp_sums[w][tid];
  }
  if (p.splits == 1) {
    if (tid < kRows) out[tid] = narrow<kFp16>(0.0f + sum);
  } else {
    // spec §4.2: ordered last-arrival reduction with a self-resetting ticket.
    float* partials = ri.split_partials();
    const int64_t r = rb * kRankTile + tid;
    if (tid < kRankTile) partials[(z * p.P + pair) * kRank + r] = sum;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      uint32_t* counter = ri.split_counters() + pair * (kRank / kRankTile) + rb;
      const uint32_t arrived = atomicAdd(counter, 1u);
      *last_split = arrived == static_cast<uint32_t>(p.splits - 1);
      if (*last_split) atomicExch(counter, 0u);
    }
    __syncthreads();
    if (*last_split) {
      __threadfence();
      if (tid < kRankTile) {
        float total = 0.0f;
        for (int s = 0; s < p.splits; ++s)
          total = total + __ldcg(partials + (s * p.P + pair) * kRank + r);
        out[tid] = narrow<kFp16>(total);
      }
    }
  }
}

/// A pair's token t, expert e and LoRA l (-1 for padding or no LoRA) in one dependent round
/// trip when T <= 32: lane i loads lora_indices[i] together with the pair's token and expert,
/// and l is a shuffle away (else lora_indices[t] is a second trip). The whole warp calls it.
struct PairRoute {
  int64_t t, e, l;
};
CAKEMOE_DEVICE PairRoute load_pair_route(const CakeParams& p, int64_t pair) {
  const bool lora_in_lanes = p.T <= kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t lane_lora = lora_in_lanes && lane < p.T ? p.lora_indices[lane] : -1;
  PairRoute r;
  r.t = p.sorted_token_ids[pair];
  r.e = p.expert_ids[pair];
  const bool token_ok = r.t >= 0 && r.t < p.T;
  if (lora_in_lanes) {
    const int64_t shuffled =
        __shfl_sync(0xFFFFFFFFu, lane_lora, token_ok ? static_cast<int>(r.t) : 0);
    r.l = token_ok ? shuffled : -1;
  } else {
    r.l = token_ok ? p.lora_indices[r.t] : -1;
  }
  return r;
}

// NOTE: half / quarter blocks (4 / 2 rows) are built for the register form with one split only:
// the split counters and partials are laid out per 8-row block (the launcher refuses splits > 1).
template <bool kFp16, int kRank, ShrinkKind kKind>
__global__ void __launch_bounds__(kShrinkThreads) cake_shrink_kernel(const CakeParams p) {
  constexpr ShrinkForm kForm = shrink_form(kKind);
  constexpr int kRows = kForm.rows;
  static_assert(kRows == kRankTile || ((kRows == 4 || kRows == 2) && kForm.ring_stages == 0),
                "4- and 2-row blocks: register form only");
  extern __shared__ uint4 ring[];
  __shared__ float warp_sums[kShrinkThreads / kWarp][kRankTile];
  __shared__ int last_split;
  // NOTE: a no-op unless this grid was launched as a programmatic dependent; keeps the route
  // index reads below ordered after any producer the runtime chains in front of the shrink.
  ptx::griddep_wait();
  if (p.pdl_mode == 1) ptx::griddep_launch_dependents();
  const int tid = threadIdx.x;
  const int rb = blockIdx.y;
  const int z = blockIdx.z;
  const int64_t pair = p.order != nullptr ? p.order[blockIdx.x] : blockIdx.x;
  const RouteIndex ri{p.route_index, p.T};
  if (blockIdx.x == 0 && rb == 0 && z == 0 && tid == 0) {
    *ri.parity() = load_word(ri.launch_counter()) & 1u;
  }
  const PairRoute route = load_pair_route(p, pair);
  const int64_t t = route.t, l = route.l, e = route.e;
  uint16_t* out = static_cast<uint16_t*>(p.shrink_out) + pair * kRank + rb * kRows;
  if (l < 0) {  // padding or no LoRA: a zero row, never published
    if (z == 0 && tid < kRows) out[tid] = 0;
    if (p.pdl_mode == 2) ptx::griddep_launch_dependents();
    return;
  }
  const bool publisher = rb == 0 && z == 0 && tid == 0 && !implicit_pair(pair, t, p.P, p.T);
  PublishTicket ticket{};
  if (publisher) ticket = publish_begin(ri, t);

  const uint16_t* x_row = static_cast<const uint16_t*>(p.x) + t * p.H;
  const uint16_t* a_rows =
      static_cast<const uint16_t*>(p.lora_a) + ((l * p.E + e) * kRank + rb * kRows) * p.H;
  const int64_t tiles = (p.H + kShrinkTile - 1) / kShrinkTile;
  const int64_t per_split = (tiles + p.splits - 1) / p.splits;
  const int64_t t0 = min(static_cast<int64_t>(z) * per_split, tiles);
  const int64_t t1 = min(static_cast<int64_t>(z + 1) * per_split, tiles);
  float acc[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) acc[i] = 0.0f;
  if constexpr (kForm.ring_stages == 0) {
    shrink_tile_registers<kFp16, kForm.register_tiles, kRows>(t0, t1, p.H, x_row, a_rows, acc);
  } else {
    shrink_tile_loop<kFp16, kForm.ring_stages>(ring, t0, t1, p.H, x_row, a_rows, acc);
  }
  if (p.pdl_mode == 2) ptx::griddep_launch_dependents();

  shrink_reduce_store<kFp16, kRank, kRows>(p, ri, pair, rb, z, acc, warp_sums, &last_split, out);
  if (publisher) publish_end(ri, ticket, t, pair);
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
