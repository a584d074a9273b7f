// The sm90 GEMM main loop of the families Hopper has no MMA for: nvfp4, nvfp4_bf16tok (e2m1 with
// e4m3 block scales of 16) and mxfp8 (e4m3 with ue8m0 block scales of 32). Both operands are
// dequantized exactly (nvfp4: f16, mxfp8: bf16) and multiplied by wgmma into fp32.
//   Weights (wgmma A, from registers): the TMA thread streams raw boxes (128 rows x 64 / 128
//   bytes) and their 128x4 scale groups; each consumer thread decodes the 32 K elements it owns of
//   its two rows per stage (tile_config.h dq_logical_k).
//   Tokens (wgmma B, shared memory): one gather warp copies raw rows and scale bytes into a
//   cp.async ring; two convert warps write them dequantized in the 128-byte swizzle, in the same
//   permuted K order. Copies and conversion sit in different warps because the proxy fence a
//   converter issues before releasing a stage (MEMBAR) also waits for that thread's own copies in
//   flight.
// Exactness. nvfp4: e2m1 * e4m3 has at most 6 significant bits and lies in [2^-10, 2688]; each
// operand is stored as value * 2^-7 (at most 21; the smallest step 2^-17 is a multiple of f16's
// subnormal step 2^-24), so every product is exact in fp32 and the accumulators are the fp32 sums
// of the exact products times 2^-14, undone by one exact multiply (kAccScale). mxfp8: e4m3 *
// 2^(s-127) is computed in fp32 as the CPU reader does and is a bf16 (4 significant bits) unless
// it falls below bf16's subnormal range (2^-133), far from any real scale.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/macros.h"
#include "formats/codecs.h"
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

constexpr uint32_t kDqScale2 = 0x58005800u;  ///< f16x2 (128, 128)

/// A dequantized family's constants and its wgmma.
template <Family F>
struct DqFormat {
  static constexpr bool kFp4 = dq_fp4(F);
  static constexpr int kRaw = dq_raw_row_bytes(F);            ///< raw bytes per row per stage
  static constexpr int kBlock = dq_block_elems(F);            ///< K elements per scale
  static constexpr int kWScale = dq_weight_scale_bytes(F);    ///< 128x4 bytes per stage
  static constexpr int kTScale = dq_token_scale_bytes(F);     ///< token scale bytes per row
  static constexpr float kAccScale = kFp4 ? 16384.0f : 1.0f;  ///< nvfp4: 2^14 (see the header)
  template <int N>
  using Mma = std::conditional_t<kFp4, ptx::WgmmaF16RS<N>, ptx::WgmmaBf16RS<N>>;
};

/// Shared-memory carve-up of a dequantizing CTA (offsets from the 1024-aligned base).
template <Family F, int N>
struct DqLayout {
  using Fmt = DqFormat<F>;
  static constexpr int kStages = dq_stages_for(F, N);
  static constexpr int kRing = dq_ring_slots(N);
  static constexpr int kB = 0;  ///< tokens: [stage][2 atoms][N rows][128 bytes]
  static constexpr int kA = kB + kStages * dq_b_stage_bytes(N);         ///< [stage][128][raw]
  static constexpr int kAScale = kA + kStages * kBlockM * Fmt::kRaw;    ///< [stage][kWScale]
  static constexpr int kRingData = kAScale + kStages * Fmt::kWScale;    ///< [slot][N][raw]
  static constexpr int kRingScale = kRingData + kRing * N * Fmt::kRaw;  ///< [slot][N][kTScale]
  static constexpr int kFull = kRingScale + kRing * N * Fmt::kTScale;
  static constexpr int kEmpty = kFull + kStages * 8;
  static constexpr int kRingFull = kEmpty + kStages * 8;
  static constexpr int kRingEmpty = kRingFull + kRing * 8;
  static constexpr int kRowSrc = kRingEmpty + kRing * 8;
  static_assert(kRowSrc + N * 4 + 1024 <= dq_smem_bytes(F, N), "tile_config.h dq_smem_bytes");
  static_assert(kStages >= 2, "the pipeline needs two stages");
  static_assert(kA % 1024 == 0 && (kBlockM * Fmt::kRaw) % 1024 == 0, "weight boxes on 1024 B");
};

/// What the main loop reads: raw token rows, their block scales, the expert's weight scales, K.
struct DqOperands {
  const uint8_t* tokens;  ///< [rows, K] e4m3 or [rows, K/2] e2m1
  const uint8_t* token_scale;
  SfLayout token_layout;
  const uint8_t* weight_scale;  ///< this expert's 128x4 scales
  int64_t k;                    ///< K elements (a multiple of 64)
  int num_k;                    ///< stages
};

// ---- Decoding: 8 K elements -> 4 pairs (element t, element t + 4), t = 0..3 -------------------

/// 8 e2m1 (element i in nibble i) times `scale2` (f16x2, both halves equal) as f16x2 pairs: the
/// e2m1 bits are placed in an f16's exponent and mantissa, which reads as value * 2^-14
/// (subnormal for 0.5), and `scale2` carries the rest.
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

/// 8 e4m3 (elements 0..3 in w0's bytes, 4..7 in w1's) times `scale` as bf16x2 pairs: exact f16
/// through cvt, then fp32 products rounded to bf16 (exact, see the header).
CAKEMOE_DEVICE void e4m3x8_to_bf16x2(uint32_t w0, uint32_t w1, float scale, uint32_t (&out)[4]) {
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    // Bytes t of w0 and w1 as one 16-bit pair; whichever half cvt fills first, A and B share it.
    const uint32_t pair = __byte_perm(w0, w1, t | ((t + 4) << 4));
    const uint32_t h2 = ptx::cvt_e4m3x2_f16x2(static_cast<uint16_t>(pair));
    out[t] =
        ptx::pack_bf16x2(ptx::f16_to_f32(h2 & 0xFFFFu) * scale, ptx::f16_to_f32(h2 >> 16) * scale);
  }
}

/// A ue8m0 scale byte as the fp32 factor, or 0 when `valid` is false.
CAKEMOE_DEVICE float dq_scale_f32(uint32_t sf_byte, bool valid) {
  return valid ? formats::ue8m0_to_float(static_cast<uint8_t>(sf_byte)) : 0.0f;
}

// ---- Producers ---------------------------------------------------------------------------------

/// Producer, TMA thread: per stage one raw 128-row weight box and the stage's 128x4 scale groups
/// of this 128-row block (nvfp4: one or two 512-byte groups at the K tail, mxfp8: one), into the
/// stage buffers of layout L (this main loop's, or mainloop_mx.cuh's).
template <Family F, int N, class L = DqLayout<F, N>>
CAKEMOE_DEVICE void dq_produce_weights(const CUtensorMap* map, uint8_t* smem, const DqOperands& op,
                                       int64_t rows, const TileWork& w) {
  using Fmt = DqFormat<F>;
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  const uint64_t policy = ptx::l2_policy_evict_first();
  const int32_t m0 = w.m_block * kBlockM;
  const int64_t groups = (op.k / Fmt::kBlock + 3) / 4;  // 512-byte groups per 128-row block
  constexpr int kGroupsPerStage = Fmt::kWScale / 512;
  const uint8_t* scales = op.weight_scale + int64_t(w.m_block) * groups * 512;
  PipeState ps;
  for (int k = 0; k < op.num_k; ++k, ps.advance(L::kStages)) {
    const int64_t g0 = int64_t(k) * kGroupsPerStage;
    const int64_t left = groups - g0;
    const uint32_t scale_bytes = (left < kGroupsPerStage ? left : kGroupsPerStage) * 512;
    ptx::mbarrier_wait_parity(&empty[ps.stage], ps.phase ^ 1);
    ptx::mbarrier_arrive_expect_tx(&full[ps.stage], kBlockM * Fmt::kRaw + scale_bytes);
    ptx::tma_load_2d(smem + L::kA + ps.stage * kBlockM * Fmt::kRaw, map, &full[ps.stage],
                     k * Fmt::kRaw, static_cast<int32_t>(w.expert * rows + m0), policy);
    ptx::bulk_load(smem + L::kAScale + ps.stage * Fmt::kWScale, scales + g0 * 512, scale_bytes,
                   &full[ps.stage], policy);
  }
}

/// Arrivals that free a weight stage: every consumer thread, because each read the stage's raw
/// A and scales with ld.shared (one elected lane after __syncwarp is equivalent under the PTX
/// memory model, but compute-sanitizer racecheck reports the producer's next bulk copy of the
/// scales as a race with the other lanes' reads).
constexpr int kDqEmptyArrivals = kConsumerThreads;

constexpr int kDqCopyThreads = 32;     ///< gather warp 1: raw token copies
constexpr int kDqConvertThreads = 64;  ///< gather warps 2, 3: conversion
static_assert(kDqCopyThreads + kDqConvertThreads == kGatherThreads, "gather warps");

/// Producer, copy warp (`lane` 0..31): per stage, the tile's token rows row_src[r]: 32-byte data
/// pieces and 4-byte scale pieces (4 blocks each: all three scale layouts keep them contiguous)
/// into the stage's ring slot, zeros for absent rows and past K; ring_full completes when the
/// copies land.
template <Family F, int N>
CAKEMOE_DEVICE void dq_copy_tokens(const DqOperands& op, const int32_t* row_src, uint8_t* smem,
                                   int lane) {
  using L = DqLayout<F, N>;
  using Fmt = DqFormat<F>;
  constexpr int kPieces = Fmt::kRaw / 32;  // data pieces per row
  constexpr int kScalePieces = Fmt::kTScale / 4;
  constexpr int kElemsPerByte = Fmt::kFp4 ? 2 : 1;
  auto* ring_full = reinterpret_cast<uint64_t*>(smem + L::kRingFull);
  auto* ring_empty = reinterpret_cast<uint64_t*>(smem + L::kRingEmpty);
  const int64_t row_bytes = op.k / kElemsPerByte, kblocks = op.k / Fmt::kBlock;
  PipeState rs;  // the raw token ring's slot and phase
  for (int k = 0; k < op.num_k; ++k, rs.advance(L::kRing)) {
    ptx::mbarrier_wait_parity(&ring_empty[rs.stage], rs.phase ^ 1);
    for (int i = lane; i < kPieces * N; i += kDqCopyThreads) {
      const int r = i / kPieces, piece = i % kPieces;
      const int32_t src = row_src[r];
      const int64_t byte = int64_t(k) * Fmt::kRaw + 32 * piece;
      const bool valid = src >= 0 && byte < row_bytes;
      const uint8_t* from = valid ? op.tokens + src * row_bytes + byte : op.tokens;
      uint8_t* to = smem + L::kRingData + (rs.stage * N + r) * Fmt::kRaw + 32 * piece;
      ptx::cp_async_16(to, from, valid);
      ptx::cp_async_16(to + 16, valid ? from + 16 : from, valid);
    }
    for (int i = lane; i < kScalePieces * N; i += kDqCopyThreads) {
      const int r = i / kScalePieces, piece = i % kScalePieces;
      const int32_t src = row_src[r];
      const int64_t block = int64_t(k) * Fmt::kTScale + 4 * piece;
      const bool valid = src >= 0 && block < kblocks;
      const uint8_t* sf =
          valid ? op.token_scale + formats::sf_offset(op.token_layout, src, block, kblocks)
                : op.token_scale;
      ptx::cp_async_4(smem + L::kRingScale + (rs.stage * N + r) * Fmt::kTScale + 4 * piece, sf,
                      valid);
    }
    ptx::cp_async_mbarrier_arrive_noinc(&ring_full[rs.stage]);
  }
}

/// Producer, convert warps (`ctid` 0..63): per stage, every group of 8 K elements of a token row
/// in the ring slot becomes 4 pairs in dq_logical_k order in the stage's two swizzle atoms; then
/// the stage is full and the slot free. A thread always converts group g = ctid % 16 of rows
/// ctid / 16 + 4m, so its 4 target offsets (for both parities of the row's swizzle phase) are
/// computed once, and decode tiles spread over all 64 threads. Groups past K become zeros.
template <Family F, int N>
CAKEMOE_DEVICE void dq_convert_tokens(uint8_t* smem, const DqOperands& op, int ctid) {
  using L = DqLayout<F, N>;
  using Fmt = DqFormat<F>;
  constexpr int kGroups = kDqStageK / 8;  // 16 groups of 8 elements per row per stage
  constexpr int kRowsPerPass = kDqConvertThreads / kGroups;
  constexpr int kGroupBytes = Fmt::kRaw / kGroups;  // 4 (e2m1) or 8 (e4m3)
  static_assert(kRowsPerPass == 4 && N % kRowsPerPass == 0, "convert mapping");
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  auto* ring_full = reinterpret_cast<uint64_t*>(smem + L::kRingFull);
  auto* ring_empty = reinterpret_cast<uint64_t*>(smem + L::kRingEmpty);
  const int g = ctid % kGroups, r_first = ctid / kGroups;
  // Offsets of pair t inside a row, for rows r with r % 8 == (r_first + 4 * parity) % 8.
  int offset[2][4];
#pragma unroll
  for (int parity = 0; parity < 2; ++parity) {
    const int phase = (r_first + 4 * parity) % 8;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int lk = dq_logical_k(8 * g + t);  // pair (t, t + 4) sits at (lk, lk + 1)
      const int atom = lk / 64, byte = (lk % 64) * 2;
      offset[parity][t] = atom * N * kRowBytes + (((byte / 16) ^ phase) << 4) + byte % 16;
    }
  }
  PipeState ps;
  PipeState rs;  // the raw token ring's slot and phase
  for (int k = 0; k < op.num_k; ++k, ps.advance(L::kStages), rs.advance(L::kRing)) {
    ptx::mbarrier_wait_parity(&ring_full[rs.stage], rs.phase);
    ptx::mbarrier_wait_parity(&empty[ps.stage], ps.phase ^ 1);
    const uint32_t b = ptx::smem_addr(smem + L::kB + ps.stage * dq_b_stage_bytes(N));
    const uint32_t data = ptx::smem_addr(smem + L::kRingData + rs.stage * N * Fmt::kRaw);
    const uint32_t scales = ptx::smem_addr(smem + L::kRingScale + rs.stage * N * Fmt::kTScale);
    const bool in_k = int64_t(k) * kDqStageK + 8 * g < op.k;
    const int block = 8 * g / Fmt::kBlock;  // the group's scale within the row's stage scales
#pragma unroll
    for (int m = 0; m < N / kRowsPerPass; ++m) {
      const int r = r_first + kRowsPerPass * m;
      const uint32_t sf = ptx::ld_shared_u8(scales + r * Fmt::kTScale + block);
      uint32_t pairs[4];
      if constexpr (Fmt::kFp4) {
        const uint32_t word = ptx::ld_shared_b32(data + r * Fmt::kRaw + kGroupBytes * g);
        e2m1x8_to_f16x2(word, dq_scale2(sf, in_k), pairs);
      } else {
        const uint32_t w0 = ptx::ld_shared_b32(data + r * Fmt::kRaw + kGroupBytes * g);
        const uint32_t w1 = ptx::ld_shared_b32(data + r * Fmt::kRaw + kGroupBytes * g + 4);
        e4m3x8_to_bf16x2(w0, w1, dq_scale_f32(sf, in_k), pairs);
      }
      const uint32_t row = b + r * kRowBytes;
#pragma unroll
      for (int t = 0; t < 4; ++t) ptx::st_shared_b32(row + offset[m % 2][t], pairs[t]);
    }
    ptx::fence_proxy_async_shared();
    ptx::mbarrier_arrive(&full[ps.stage]);
    ptx::mbarrier_arrive(&ring_empty[rs.stage]);
  }
}

// ---- Consumer ----------------------------------------------------------------------------------

/// The A operand of one consumer thread for one stage: per row (r0, r0 + 8) the 32 K elements
/// [32q, 32q + 32) and their scales, decoded group by group (4 groups of 8 elements).
template <Family F, bool kFp4 = dq_fp4(F)>
struct DqStageA;

/// nvfp4 families: the 16 raw bytes of each row are loaded with the stage (8 registers).
template <Family F>
struct DqStageA<F, true> {
  uint32_t words[2][4];
  uint32_t scale2[2][2];  ///< f16x2 scales of blocks 2q, 2q + 1

  /// Pairs of group j (elements 32q + 8j + i) of row `row`.
  CAKEMOE_DEVICE void decode(int row, int j, uint32_t (&pairs)[4]) const {
    e2m1x8_to_f16x2(words[row][j], scale2[row][j / 2], pairs);
  }
};

/// mxfp8: a group's 8 raw bytes are loaded when it is decoded (all 32 bytes of both rows up front
/// took 16 registers and spilled at tiles 16..64).
template <Family F>
struct DqStageA<F, false> {
  uint32_t row[2];    ///< shared address of the row in the stage's weight box
  uint32_t phase[2];  ///< the row's 128-byte swizzle phase, r % 8
  uint32_t chunk;     ///< 2q: the first of the two 16-byte chunks holding elements [32q, +32)
  float scale[2];     ///< block q

  CAKEMOE_DEVICE void decode(int r, int j, uint32_t (&pairs)[4]) const {
    // dq_weight_chunk_offset(F, row, 2q + j / 2) plus the group's half of the chunk.
    const uint32_t at = row[r] + (((chunk + j / 2) ^ phase[r]) << 4) + 8 * (j % 2);
    const uint2 w = ptx::ld_shared_v2(at);
    e4m3x8_to_bf16x2(w.x, w.y, scale[r], pairs);
  }
};

/// Loads what a consumer thread needs of one stage's A (rows r0, r1 of the 128-row block; lane
/// quad q): nvfp4 the raw words and scales, mxfp8 the scales and the rows' addresses.
template <Family F>
CAKEMOE_DEVICE DqStageA<F> dq_load_a(uint32_t a, uint32_t sc, int r0, int r1, int q, int k,
                                     int64_t kblocks) {
  using Fmt = DqFormat<F>;
  DqStageA<F> s;
  const int rows[2] = {r0, r1};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = rows[i];
    if constexpr (Fmt::kFp4) {
      // Elements [32q, 32q + 32) are bytes [16q, 16q + 16): chunk q.
      const uint4 v = ptx::ld_shared_v4(a + dq_weight_chunk_offset(F, r, q));
      s.words[i][0] = v.x, s.words[i][1] = v.y, s.words[i][2] = v.z, s.words[i][3] = v.w;
      const uint32_t sf = ptx::ld_shared_u16(sc + dq_weight_scale_offset(F, r, q));
      // Groups past K were not copied (stale bytes): their scales read as 0.
      const bool valid = int64_t(k) * 8 + 4 * (q / 2) < kblocks;
      s.scale2[i][0] = dq_scale2(sf & 0xFFu, valid);
      s.scale2[i][1] = dq_scale2(sf >> 8, valid);
    } else {
      s.row[i] = a + r * kRowBytes;
      s.phase[i] = r % 8;
      const uint32_t sf = ptx::ld_shared_u8(sc + dq_weight_scale_offset(F, r, q));
      s.scale[i] = dq_scale_f32(sf, int64_t(k) * 4 + q < kblocks);
    }
  }
  if constexpr (!Fmt::kFp4) s.chunk = 2 * q;
  return s;
}

/// Consumer warpgroup `group` (0, 1): acc[64 x N] = its 64 weight rows x the tile's tokens, in
/// true units. Per stage each thread loads its 2 rows' raw bytes and scales, then per group j of
/// 8 elements decodes 8 A registers and issues k16 steps 2j and 2j + 1; the two register sets
/// alternate, and wgmma_wait<1> frees the older one before it is rewritten.
template <Family F, int N>
CAKEMOE_DEVICE void dq_consume(uint8_t* smem, const DqOperands& op, int group,
                               float (&acc)[N / 2]) {
  using L = DqLayout<F, N>;
  using Fmt = DqFormat<F>;
  using Mma = typename Fmt::template Mma<N>;
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
  const int r0 = 64 * group + 16 * warp + lane / 4, r1 = r0 + 8;
  const int64_t kblocks = op.k / Fmt::kBlock;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  uint32_t regs[2][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) regs[0][i] = regs[1][i] = 0u;
  PipeState ps;
  int previous = -1;
  for (int k = 0; k < op.num_k; ++k, ps.advance(L::kStages)) {
    ptx::mbarrier_wait_parity(&full[ps.stage], ps.phase);
    const DqStageA<F> sa = dq_load_a<F>(
        ptx::smem_addr(smem + L::kA + ps.stage * kBlockM * Fmt::kRaw),
        ptx::smem_addr(smem + L::kAScale + ps.stage * Fmt::kWScale), r0, r1, q, k, kblocks);
    const uint64_t db = ptx::sw128_kmajor_desc(smem + L::kB + ps.stage * dq_b_stage_bytes(N));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t(&set)[8] = regs[j % 2];
      uint32_t p0[4], p1[4];
      sa.decode(0, j, p0);
      sa.decode(1, j, p1);
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
        // The last group of the previous stage is complete: its shared memory is free. Every
        // thread read the stage's A with ld.shared and releases its own reads (mbarrier.arrive
        // releases only the arriving thread's accesses; see kDqEmptyArrivals).
        if (previous >= 0) ptx::mbarrier_arrive(&empty[previous]);
        previous = ps.stage;
      }
    }
  }
  ptx::wgmma_wait<0>();
  ptx::fence_operands(acc);
  ptx::fence_operands(regs[0]);
  ptx::fence_operands(regs[1]);
  if (previous >= 0) ptx::mbarrier_arrive(&empty[previous]);
  if constexpr (Fmt::kAccScale != 1.0f) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[i] *= Fmt::kAccScale;
  }
}

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
