// The sm90 GEMM main loop of the nvfp4 families (nvfp4, nvfp4_bf16tok). Hopper has no FP4 MMA, so
// both operands are dequantized exactly to f16 and multiplied by f16 wgmma into fp32.
//   Weights (wgmma A, from registers): the TMA thread streams raw e2m1 boxes (128 rows x 64 bytes)
//   and their 128x4 scale groups; each consumer thread decodes the 32 K elements it owns of its two
//   rows per stage (tile_config.h dq_logical_k).
//   Tokens (wgmma B, shared memory): one gather warp copies raw rows and scale bytes into a
//   cp.async ring; two convert warps write them as f16 in the 128-byte swizzle, in the same
//   permuted K order. Copies and conversion sit in different warps because the proxy fence a
//   converter issues before releasing a stage (MEMBAR) also waits for that thread's copies in
//   flight, which serialised every stage on a memory round trip.
// Exactness: e2m1 * e4m3 has at most 6 significant bits and lies in [2^-10, 2688]. Each operand is
// stored as value * 2^-7 (at most 21; the smallest step 2^-17 is a multiple of f16's subnormal
// step 2^-24), so every product is exact in fp32, and the accumulators are the fp32 sums of the
// exact products times 2^-14, undone by one exact multiply (kDqAccScale).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"
#include "formats/layouts.h"
#include "ptx/convert.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "stepfun/sm90/mainloop_ss.cuh"
#include "stepfun/sm90/tile_config.h"
#include "stepfun/sm90/tile_scheduler.cuh"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

constexpr float kDqAccScale = 16384.0f;  ///< 2^14: both operands were scaled by 2^-7
constexpr uint32_t kDqScale2 = 0x58005800u;  ///< f16x2 (128, 128)

/// Shared-memory carve-up of an nvfp4 CTA (offsets from the 1024-aligned base).
template <int N>
struct DqLayout {
  static constexpr int kStages = dq_stages_for(N);
  static constexpr int kRing = dq_ring_slots(N);
  static constexpr int kB = 0;  ///< f16 tokens: [stage][2 atoms][N rows][128 bytes]
  static constexpr int kA = kB + kStages * dq_b_stage_bytes(N);  ///< raw weights [stage][128][64]
  static constexpr int kAScale = kA + kStages * kBlockM * kDqRawRowBytes;  ///< [stage][1024]
  static constexpr int kRingData = kAScale + kStages * kDqScaleBytes;      ///< [slot][N][64]
  static constexpr int kRingScale = kRingData + kRing * N * kDqRawRowBytes;  ///< [slot][N][8]
  static constexpr int kFull = kRingScale + kRing * N * 8;
  static constexpr int kEmpty = kFull + kStages * 8;
  static constexpr int kRingFull = kEmpty + kStages * 8;
  static constexpr int kRingEmpty = kRingFull + kRing * 8;
  static constexpr int kRowSrc = kRingEmpty + kRing * 8;
  static_assert(kRowSrc + N * 4 + 1024 <= dq_smem_bytes(N), "tile_config.h dq_smem_bytes");
  static_assert(kStages >= 2, "the pipeline needs two stages");
};

/// What the nvfp4 main loop reads: e2m1 rows, their e4m3 block scales and K.
struct DqOperands {
  const uint8_t* tokens;  ///< [rows, K/2] e2m1
  const uint8_t* token_scale;
  SfLayout token_layout;
  const uint8_t* weight_scale;  ///< this expert's 128x4 scales
  int64_t k;                    ///< K elements (a multiple of 64)
  int num_k;                    ///< stages
};

/// 8 e2m1 (element i in nibble i) times `scale2` (f16x2, both halves equal) as 4 f16x2 pairs
/// (element t, element t + 4): the e2m1 bits are placed in an f16's exponent and mantissa, which
/// reads as value * 2^-14 (subnormal for 0.5), and `scale2` carries the rest.
CAKEMOE_DEVICE void e2m1x8_to_f16x2(uint32_t w, uint32_t scale2, uint32_t (&out)[4]) {
  constexpr uint32_t kMag = 0x0E000E00u, kSign = 0x80008000u;
  out[0] = ((w << 9) & kMag) | ((w << 12) & kSign);
  out[1] = ((w << 5) & kMag) | ((w << 8) & kSign);
  out[2] = ((w << 1) & kMag) | ((w << 4) & kSign);
  out[3] = ((w >> 3) & kMag) | (w & kSign);
#pragma unroll
  for (int t = 0; t < 4; ++t) out[t] = ptx::mul_f16x2(out[t], scale2);
}

/// An e4m3 block scale byte as f16x2 (scale * 2^7 in both halves), or 0 when `valid` is false.
CAKEMOE_DEVICE uint32_t dq_scale2(uint32_t sf_byte, bool valid) {
  const uint32_t s = ptx::cvt_e4m3x2_f16x2(static_cast<uint16_t>(sf_byte * 0x0101u));
  return valid ? ptx::mul_f16x2(s, kDqScale2) : 0u;
}

/// Producer, TMA thread: per stage one raw 128-row x 64-byte weight box and the stage's 128x4
/// scale groups (one or two 512-byte groups of this 128-row block).
template <int N>
CAKEMOE_DEVICE void dq_produce_weights(const CUtensorMap* map, uint8_t* smem,
                                       const DqOperands& op, int64_t rows, const TileWork& w) {
  using L = DqLayout<N>;
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  const uint64_t policy = ptx::l2_policy_evict_first();
  const int32_t m0 = w.m_block * kBlockM;
  const int64_t groups = op.k / 64;  // 512-byte groups of 4 scales per 128-row block
  const uint8_t* scales = op.weight_scale + int64_t(w.m_block) * groups * 512;
  PipeState ps;
  for (int k = 0; k < op.num_k; ++k, ps.advance(L::kStages)) {
    const int64_t g0 = 2 * int64_t(k);
    const uint32_t scale_bytes = (groups - g0 >= 2 ? 2 : 1) * 512;
    ptx::mbarrier_wait_parity(&empty[ps.stage], ps.phase ^ 1);
    ptx::mbarrier_arrive_expect_tx(&full[ps.stage], kBlockM * kDqRawRowBytes + scale_bytes);
    ptx::tma_load_2d(smem + L::kA + ps.stage * kBlockM * kDqRawRowBytes, map, &full[ps.stage],
                     k * kDqRawRowBytes, static_cast<int32_t>(w.expert * rows + m0), policy);
    ptx::bulk_load(smem + L::kAScale + ps.stage * kDqScaleBytes, scales + g0 * 512, scale_bytes,
                   &full[ps.stage], policy);
  }
}

constexpr int kDqCopyThreads = 32;     ///< gather warp 1: raw token copies
constexpr int kDqConvertThreads = 64;  ///< gather warps 2, 3: f16 conversion
static_assert(kDqCopyThreads + kDqConvertThreads == kGatherThreads, "gather warps");

/// Ring slot position (slot, phase) of the raw token ring.
struct RingState {
  int slot = 0;
  uint32_t phase = 0;
  CAKEMOE_DEVICE void advance(int slots) {
    if (++slot == slots) slot = 0, phase ^= 1;
  }
};

/// Producer, copy warp (`lane` 0..31): per stage, item (row r, half h) of the tile copies 64 K
/// elements (32 bytes) of token row row_src[r] and their 4 scale bytes into the stage's ring slot
/// (zeros for absent rows and past K); ring_full completes when the copies land.
template <int N>
CAKEMOE_DEVICE void dq_copy_tokens(const DqOperands& op, const int32_t* row_src, uint8_t* smem,
                                   int lane) {
  using L = DqLayout<N>;
  auto* ring_full = reinterpret_cast<uint64_t*>(smem + L::kRingFull);
  auto* ring_empty = reinterpret_cast<uint64_t*>(smem + L::kRingEmpty);
  const int64_t row_bytes = op.k / 2, kblocks = op.k / 16;
  RingState rs;
  for (int k = 0; k < op.num_k; ++k, rs.advance(L::kRing)) {
    ptx::mbarrier_wait_parity(&ring_empty[rs.slot], rs.phase ^ 1);
    for (int i = lane; i < 2 * N; i += kDqCopyThreads) {
      const int r = i / 2, h = i % 2;
      const int32_t src = row_src[r];
      const int64_t elem = int64_t(k) * kDqStageK + 64 * h;
      const bool valid = src >= 0 && elem < op.k;
      const uint8_t* from = valid ? op.tokens + src * row_bytes + elem / 2 : op.tokens;
      uint8_t* to = smem + L::kRingData + (rs.slot * N + r) * kDqRawRowBytes + 32 * h;
      ptx::cp_async_16(to, from, valid);
      ptx::cp_async_16(to + 16, valid ? from + 16 : from, valid);
      const uint8_t* sf =
          valid ? op.token_scale + formats::sf_offset(op.token_layout, src, elem / 16, kblocks)
                : op.token_scale;
      ptx::cp_async_4(smem + L::kRingScale + (rs.slot * N + r) * 8 + 4 * h, sf, valid);
    }
    ptx::cp_async_mbarrier_arrive_noinc(&ring_full[rs.slot]);
  }
}

/// Producer, convert warps (`ctid` 0..63): per stage, each item of the ring slot becomes f16
/// pairs in dq_logical_k order in the stage's two swizzle atoms; then the stage is full and the
/// slot free.
template <int N>
CAKEMOE_DEVICE void dq_convert_tokens(uint8_t* smem, int num_k, int ctid) {
  using L = DqLayout<N>;
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  auto* ring_full = reinterpret_cast<uint64_t*>(smem + L::kRingFull);
  auto* ring_empty = reinterpret_cast<uint64_t*>(smem + L::kRingEmpty);
  PipeState ps;
  RingState rs;
  for (int k = 0; k < num_k; ++k, ps.advance(L::kStages), rs.advance(L::kRing)) {
    ptx::mbarrier_wait_parity(&ring_full[rs.slot], rs.phase);
    ptx::mbarrier_wait_parity(&empty[ps.stage], ps.phase ^ 1);
    uint8_t* b = smem + L::kB + ps.stage * dq_b_stage_bytes(N);
    for (int i = ctid; i < 2 * N; i += kDqConvertThreads) {
      const int r = i / 2, h = i % 2;
      const uint8_t* raw = smem + L::kRingData + (rs.slot * N + r) * kDqRawRowBytes + 32 * h;
      const uint4 lo = *reinterpret_cast<const uint4*>(raw);
      const uint4 hi = *reinterpret_cast<const uint4*>(raw + 16);
      const uint32_t sf4 =
          *reinterpret_cast<const uint32_t*>(smem + L::kRingScale + (rs.slot * N + r) * 8 + 4 * h);
      const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int ww = 0; ww < 8; ++ww) {
        uint32_t pairs[4];
        // Zero-filled past K and for absent rows: the scale byte is 0 too, so the pairs are 0.
        e2m1x8_to_f16x2(words[ww], dq_scale2((sf4 >> (8 * (ww / 2))) & 0xFFu, true), pairs);
        const int p0 = 64 * h + 8 * ww;  // physical K of nibble 0
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int lk = dq_logical_k(p0 + t);  // pair (t, t + 4) sits at (lk, lk + 1)
          const int atom = lk / 64, byte = (lk % 64) * 2;
          uint8_t* to = b + atom * N * kRowBytes + r * kRowBytes +
                        (((byte / 16) ^ (r % 8)) << 4) + byte % 16;
          *reinterpret_cast<uint32_t*>(to) = pairs[t];
        }
      }
    }
    ptx::fence_proxy_async_shared();
    ptx::mbarrier_arrive(&full[ps.stage]);
    ptx::mbarrier_arrive(&ring_empty[rs.slot]);
  }
}

/// Consumer warpgroup `group` (0, 1): acc[64 x N] = its 64 weight rows x the tile's tokens, in
/// units of 2^-14 (see the header). Per stage each thread loads its 2 rows x 16 raw bytes and 2 x 2
/// scale bytes, then per 32-bit word j decodes 8 A registers and issues k16 steps 2j and 2j + 1;
/// the two register sets alternate, and wgmma_wait<1> frees the older one before it is rewritten.
template <Family F, int N>
CAKEMOE_DEVICE void dq_consume(uint8_t* smem, const DqOperands& op, int group,
                               float (&acc)[N / 2]) {
  using L = DqLayout<N>;
  using Mma = ptx::WgmmaF16RS<N>;
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
  const int r0 = 64 * group + 16 * warp + lane / 4, r1 = r0 + 8;
  const bool lane0 = lane == 0;
  const int64_t kblocks = op.k / 16;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  uint32_t regs[2][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) regs[0][i] = regs[1][i] = 0u;
  PipeState ps;
  int previous = -1;
  for (int k = 0; k < op.num_k; ++k, ps.advance(L::kStages)) {
    ptx::mbarrier_wait_parity(&full[ps.stage], ps.phase);
    const uint8_t* a = smem + L::kA + ps.stage * kBlockM * kDqRawRowBytes;
    const uint4 w0 = *reinterpret_cast<const uint4*>(a + r0 * kDqRawRowBytes + 16 * q);
    const uint4 w1 = *reinterpret_cast<const uint4*>(a + r1 * kDqRawRowBytes + 16 * q);
    // 128x4 group q / 2 holds blocks 2q, 2q + 1 of each row at (r % 32) * 16 + (r / 32) * 4 + c.
    const uint8_t* sc = smem + L::kAScale + ps.stage * kDqScaleBytes + (q / 2) * 512 + 2 * (q % 2);
    const uint32_t s0 = *reinterpret_cast<const uint16_t*>(sc + (r0 % 32) * 16 + (r0 / 32) * 4);
    const uint32_t s1 = *reinterpret_cast<const uint16_t*>(sc + (r1 % 32) * 16 + (r1 / 32) * 4);
    // Groups past K were not copied (stale bytes): their scales read as 0.
    const bool valid = int64_t(k) * 8 + 4 * (q / 2) < kblocks;
    const uint32_t sa[2][2] = {{dq_scale2(s0 & 0xFFu, valid), dq_scale2(s0 >> 8, valid)},
                               {dq_scale2(s1 & 0xFFu, valid), dq_scale2(s1 >> 8, valid)}};
    const uint32_t words0[4] = {w0.x, w0.y, w0.z, w0.w};
    const uint32_t words1[4] = {w1.x, w1.y, w1.z, w1.w};
    const uint64_t db = ptx::sw128_kmajor_desc(smem + L::kB + ps.stage * dq_b_stage_bytes(N));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t(&set)[8] = regs[j % 2];
      uint32_t p0[4], p1[4];
      e2m1x8_to_f16x2(words0[j], sa[0][j / 2], p0);
      e2m1x8_to_f16x2(words1[j], sa[1][j / 2], p1);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        set[4 * u + 0] = p0[2 * u];
        set[4 * u + 1] = p1[2 * u];
        set[4 * u + 2] = p0[2 * u + 1];
        set[4 * u + 3] = p1[2 * u + 1];
      }
      ptx::fence_operands(set);
      ptx::fence_operands(acc);
      ptx::wgmma_fence();
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int s = 2 * j + u;  // k16 step: atom s / 4, 32 bytes per step inside it
        const uint32_t(&frag)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&set[4 * u]);
        Mma::mma(acc, frag, ptx::desc_advance(db + ((s / 4) * N * kRowBytes >> 4), (s % 4) * 32),
                 1);
      }
      ptx::wgmma_commit();
      ptx::wgmma_wait<1>();
      ptx::fence_operands(acc);
      ptx::fence_operands(regs[(j + 1) % 2]);
      if (j == 0) {
        // The last group of the previous stage is complete: its shared memory is free.
        if (previous >= 0 && lane0) ptx::mbarrier_arrive(&empty[previous]);
        previous = ps.stage;
      }
    }
  }
  ptx::wgmma_wait<0>();
  ptx::fence_operands(acc);
  ptx::fence_operands(regs[0]);
  ptx::fence_operands(regs[1]);
  if (previous >= 0 && lane0) ptx::mbarrier_arrive(&empty[previous]);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] *= kDqAccScale;
}

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
