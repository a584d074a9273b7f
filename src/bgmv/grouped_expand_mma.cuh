// Grouped expand on tensor cores (ranks 32 and 64, grouped_tensor_core_expand()): a tile's <= 16
// routes are the M side of mma.sync m16n8k16 (bf16 / fp16 in, fp32 out), B's columns the N side,
// the rank the K side. The products are exact in fp32; the order in which the tensor core adds
// them is the hardware's, so the unweighted partials differ from the canonical order's in the
// last bits (spec §3.2: the grouped pipeline is held to 1e-5 of the per-route path; replays stay
// bitwise identical). The shrink rows, the combine and its order are unchanged.
#pragma once

#include <cstdint>

#include "bgmv/grouped_index.cuh"
#include "ptx/cache_hints.cuh"
#include "ptx/mma_sync.cuh"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

constexpr int kMmaExpandWarps = 4;
constexpr int kMmaWarpCols = 64;  ///< 8 fragments of 8 columns per warp
constexpr int kMmaExpandCols = kMmaExpandWarps * kMmaWarpCols;  ///< columns per CTA

namespace mma_detail {

/// D += A * B for one m16n8k16 step (A: 4 words, row-major fragment; B: 2 words, col-major).
template <bool kBf16>
CAKEMOE_DEVICE void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                              uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    ptx::mma_sync_m16n8k16_f32_bf16(d, a0, a1, a2, a3, b0, b1);
  } else {
    ptx::mma_sync_m16n8k16_f32_f16(d, a0, a1, a2, a3, b0, b1);
  }
}

/// The R / 4 consecutive rank entries (R / 8 words) a lane holds of one shrink row or one B
/// column: entries [tig * R / 4, (tig + 1) * R / 4). NOTE: the k dimension is permuted the same
/// way for A and B (step s takes words 2s and 2s + 1 as the fragment's k pairs tig*2 and
/// tig*2 + 8), which leaves the dot product's terms unchanged; one 8-32 byte load per lane.
template <int kRank>
CAKEMOE_DEVICE void load_chunk(const uint16_t* row, int tig, uint32_t (&w)[kRank / 8],
                               uint64_t policy, bool hinted) {
  const uint16_t* at = row + tig * (kRank / 4);
  if constexpr (kRank == 16) {
    uint2 v;
    if (hinted) {
      v = ptx::ld_global_nc_l2_hint_v2_u32(at, policy);
    } else {
      v = __ldcg(reinterpret_cast<const uint2*>(at));
    }
    w[0] = v.x;
    w[1] = v.y;
  } else {
#pragma unroll
    for (int q = 0; q < kRank / 32; ++q) {
      uint4 v;
      if (hinted) {
        v = ptx::ld_global_nc_l2_hint_v4_u32(at + 8 * q, policy);
      } else {
        v = __ldcg(reinterpret_cast<const uint4*>(at) + q);
      }
      w[4 * q] = v.x;
      w[4 * q + 1] = v.y;
      w[4 * q + 2] = v.z;
      w[4 * q + 3] = v.w;
    }
  }
}

}  // namespace mma_detail

/// Grid (max_tiles, ceil(H / 256)), 128 threads: warp w owns columns [64 w, 64 w + 64) of the
/// block. Lane (g = lane / 4, tig = lane % 4) loads B's column 8 f + g for each fragment f before
/// the PDL wait (B is not the shrink's output), the shrink rows g and g + 8 after it, and stores
/// the partials of routes g and g + 8 at columns 8 f + 2 tig, + 1.
template <bool kBf16, int kRank>
__global__ void __launch_bounds__(kMmaExpandWarps * 32) grouped_expand_mma_kernel(GroupedParams p) {
  static_assert(kRank == 16 || kRank == 32 || kRank == 64, "m16n8k16 steps over the rank");
  constexpr int kWords = kRank / 8;
  constexpr int kSteps = kRank / 16;
  constexpr int kFrags = kMmaWarpCols / 8;
  const GroupedWs w = grouped_ws(p);
  const int tile = static_cast<int>(blockIdx.x);
  const int ntiles = __ldcg(w.header);
  if (tile >= ntiles) {
    ptx::griddep_wait();  // NOTE: as grouped_expand_kernel: the grid completes after the shrink
    ptx::griddep_launch_dependents();
    return;
  }
  const int4 info = __ldcg(w.tile_info + tile);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane >> 2, tig = lane & 3;
  const int64_t hidden = p.hidden;
  const int64_t colw = static_cast<int64_t>(blockIdx.y) * kMmaExpandCols +
                       (static_cast<int>(threadIdx.x) >> 5) * kMmaWarpCols;
  // NOTE: H % 8 == 0, so a fragment is wholly inside or outside the matrix (warp-uniform).
  const int frags = static_cast<int>(
      max(static_cast<int64_t>(0), min(static_cast<int64_t>(kFrags), (hidden - colw) / 8)));
  const uint64_t b_policy = read_once_policy();
  const uint16_t* bblock =
      static_cast<const uint16_t*>(p.lora_b) + static_cast<int64_t>(info.z) * hidden * kRank;
  uint32_t b[kFrags][kWords];
#pragma unroll
  for (int f = 0; f < kFrags; ++f) {
    if (f < frags) {
      mma_detail::load_chunk<kRank>(bblock + (colw + 8 * f + g) * kRank, tig, b[f], b_policy, true);
    }
  }
  const int n = info.y;
  const int pair_lo = g < n ? route_pair(p, __ldcg(w.sorted_routes + info.x + g)) : -1;
  const int pair_hi = g + 8 < n ? route_pair(p, __ldcg(w.sorted_routes + info.x + g + 8)) : -1;
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();
  uint32_t a_lo[kWords] = {}, a_hi[kWords] = {};  // rows past the tile's routes stay zero
  const uint16_t* rows = w.tile_rows + static_cast<int64_t>(info.x) * kRank;
  if (pair_lo >= 0) mma_detail::load_chunk<kRank>(rows + g * kRank, tig, a_lo, 0, false);
  if (pair_hi >= 0) mma_detail::load_chunk<kRank>(rows + (g + 8) * kRank, tig, a_hi, 0, false);
  const uint64_t partial_policy = read_again_policy();
  float* out_lo = pair_lo >= 0 ? p.partials + static_cast<int64_t>(pair_lo) * hidden : nullptr;
  float* out_hi = pair_hi >= 0 ? p.partials + static_cast<int64_t>(pair_hi) * hidden : nullptr;
#pragma unroll
  for (int f = 0; f < kFrags; ++f) {
    if (f >= frags) break;
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      mma_detail::mma_16816<kBf16>(d, a_lo[2 * s], a_hi[2 * s], a_lo[2 * s + 1], a_hi[2 * s + 1],
                                   b[f][2 * s], b[f][2 * s + 1]);
    }
    const int64_t c = colw + 8 * f + 2 * tig;
    if (out_lo != nullptr) ptx::st_global_l2_hint_v2_f32(out_lo + c, d[0], d[1], partial_policy);
    if (out_hi != nullptr) ptx::st_global_l2_hint_v2_f32(out_hi + c, d[2], d[3], partial_policy);
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
