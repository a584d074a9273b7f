// The "e4m3" variant of the sm90 mxfp8 main loop, for decode tiles (tile_config.h
// has_sm90_e4m3_unit): both operands stay e4m3 and feed e4m3 wgmma from shared memory, one k32
// instruction per ue8m0 block, and each block's partial sums are promoted into the fp32
// accumulators with their two scales: acc += part * (2^(sw - 127) * 2^(st - 127)). The weights
// come by TMA as in the dequant loop (dq_produce_weights), the token rows raw through the SS
// gather (produce_tokens) with their 4 scale bytes per stage; no conversion pass and no register
// A operand, so a consumer thread spends far fewer instructions per stage than the dequant.
// Numerics: the e4m3 products are exact; a block's 32 products are summed inside the wgmma with
// fewer than fp32's bits (as fp8's per-stage promotion, here every 32 K), the promotion is one
// fp32 fma with an exact power-of-two factor.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "ptx/convert.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/wgmma.cuh"
#include "stepfun/sm90/mainloop_rs_dequant.cuh"
#include "stepfun/sm90/mainloop_ss.cuh"
#include "stepfun/sm90/tile_config.h"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

/// Shared-memory carve-up of an e4m3-variant CTA (offsets from the 1024-aligned base). The member
/// names are the ones dq_produce_weights and produce_tokens read.
template <int N>
struct MxLayout {
  static constexpr int kStages = mx_stages_for(N);
  static constexpr int kA = 0;                                     ///< [stage][128][128 B]
  static constexpr int kB = kA + kStages * a_stage_bytes();        ///< [stage][N][128 B]
  static constexpr int kAScale = kB + kStages * b_stage_bytes(N);  ///< [stage][512]
  static constexpr int kBScale = kAScale + kStages * 512;          ///< [stage][N][4]
  static constexpr int kFull = kBScale + kStages * N * 4;
  static constexpr int kEmpty = kFull + kStages * 8;
  static constexpr int kRowSrc = kEmpty + kStages * 8;
  static_assert(kRowSrc + N * 4 + 1024 <= mx_smem_bytes(N), "tile_config.h mx_smem_bytes");
  static_assert(kStages >= 2 && kB % 1024 == 0 && b_stage_bytes(N) % 1024 == 0, "mx stages");
};

/// Arrivals that free a stage: every consumer thread (each reads the stage's scale bytes with
/// ld.shared; see kDqEmptyArrivals).
constexpr int kMxEmptyArrivals = kConsumerThreads;

/// produce_tokens' extra copies: the 4 scale bytes (blocks 4k .. 4k + 3) of each token row of
/// the tile, zeros for absent rows and past K (all three scale layouts keep them contiguous).
template <int N>
struct MxTokenScales {
  const DqOperands* op;
  const int32_t* row_src;
  uint8_t* smem;
  CAKEMOE_DEVICE void operator()(int k, int stage, int gtid) const {
    const int64_t kblocks = op->k / 32, block = int64_t(k) * 4;
    for (int r = gtid; r < N; r += kGatherThreads) {
      const int32_t src = row_src[r];
      const bool valid = src >= 0 && block < kblocks;
      const uint8_t* sf =
          valid ? op->token_scale + formats::sf_offset(op->token_layout, src, block, kblocks)
                : op->token_scale;
      ptx::cp_async_4(smem + MxLayout<N>::kBScale + (stage * N + r) * 4, sf, valid);
    }
  }
};

/// formats::ue8m0_to_float of byte b of `word`, without branches (0 -> 2^-127, 255 -> NaN).
CAKEMOE_DEVICE float ue8m0_byte(uint32_t word, int b) {
  const uint32_t code = (word >> (8 * b)) & 0xFFu;
  uint32_t bits = code << 23;
  bits = code == 0 ? 0x00400000u : bits;
  bits = code == 0xFFu ? 0x7FC00000u : bits;
  return __uint_as_float(bits);
}

/// Adds block b's partial sums into acc: rows r0 (scales sw[0]), r0 + 8 (sw[1]); columns
/// 8j + 2q + c (token scale words st[2j + c]). Blocks past K are skipped: their scale bytes are
/// stale and one of them could be a NaN code.
template <int N>
CAKEMOE_DEVICE void mx_promote(float (&acc)[N / 2], const float (&part)[N / 2],
                               const uint32_t (&sw)[2], const uint32_t (&st)[N / 4], int b,
                               bool valid) {
  if (!valid) return;
  const float w0 = ue8m0_byte(sw[0], b);
  const float w1 = ue8m0_byte(sw[1], b);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float t = ue8m0_byte(st[2 * j + c], b);
      acc[4 * j + c] = fmaf(part[4 * j + c], w0 * t, acc[4 * j + c]);
      acc[4 * j + 2 + c] = fmaf(part[4 * j + 2 + c], w1 * t, acc[4 * j + 2 + c]);
    }
  }
}

/// Consumer warpgroup `group` (0, 1): acc[64 x N] = its 64 weight rows x the tile's tokens in
/// true units. Per stage: the scale words of its 2 rows and N/4 columns, then 4 k32 wgmmas into
/// two alternating partial sets, each promoted once the next is issued.
template <int N>
CAKEMOE_DEVICE void mx_consume(uint8_t* smem, const DqOperands& op, int group,
                               float (&acc)[N / 2]) {
  using L = MxLayout<N>;
  using Mma = ptx::WgmmaE4m3SS<N>;
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
  const int r0 = 64 * group + 16 * warp + lane / 4;
  const int64_t kblocks = op.k / 32;
  // The 4 block scales of row r sit at one 4-byte word of the stage's 128x4 group.
  const int sw_at[2] = {dq_weight_scale_offset(Family::kMXFP8, r0, 0),
                        dq_weight_scale_offset(Family::kMXFP8, r0 + 8, 0)};
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  float part[2][N / 2];  // scale_d 0 overwrites them; zeroed once so no read is indeterminate
#pragma unroll
  for (int i = 0; i < N / 2; ++i) part[0][i] = part[1][i] = 0.0f;
  PipeState ps;
  for (int k = 0; k < op.num_k; ++k, ps.advance(L::kStages)) {
    const int64_t blocks_left = kblocks - int64_t(k) * 4;
    ptx::mbarrier_wait_parity(&full[ps.stage], ps.phase);
    const uint32_t sc = ptx::smem_addr(smem + L::kAScale + ps.stage * 512);
    const uint32_t sw[2] = {ptx::ld_shared_b32(sc + sw_at[0]), ptx::ld_shared_b32(sc + sw_at[1])};
    const uint32_t tsc = ptx::smem_addr(smem + L::kBScale + ps.stage * N * 4);
    uint32_t st[N / 4];
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      st[2 * j] = ptx::ld_shared_b32(tsc + (8 * j + 2 * q) * 4);
      st[2 * j + 1] = ptx::ld_shared_b32(tsc + (8 * j + 2 * q + 1) * 4);
    }
    const uint64_t da =
        ptx::sw128_kmajor_desc(smem + L::kA + ps.stage * a_stage_bytes() + group * 64 * kRowBytes);
    const uint64_t db = ptx::sw128_kmajor_desc(smem + L::kB + ps.stage * b_stage_bytes(N));
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      ptx::fence_operands(part[b % 2]);
      ptx::wgmma_fence();
      Mma::mma(part[b % 2], ptx::desc_advance(da, b * 32), ptx::desc_advance(db, b * 32), 0);
      ptx::wgmma_commit();
      if (b > 0) {
        ptx::wgmma_wait<1>();  // block b - 1 is complete
        ptx::fence_operands(part[(b - 1) % 2]);
        mx_promote<N>(acc, part[(b - 1) % 2], sw, st, b - 1, b - 1 < blocks_left);
      }
    }
    ptx::wgmma_wait<0>();
    ptx::fence_operands(part[1]);
    mx_promote<N>(acc, part[1], sw, st, 3, 3 < blocks_left);
    // Every read of the stage (wgmma and ld.shared) is done; each thread releases its own.
    ptx::mbarrier_arrive(&empty[ps.stage]);
  }
}

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
