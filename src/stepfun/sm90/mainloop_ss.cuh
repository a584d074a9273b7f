// The sm90 GEMM main loop for the families whose operands feed wgmma from shared memory as
// stored (bf16: bf16 wgmma; fp8 per-tensor: e4m3 wgmma): a TMA producer thread streams 128-row
// weight boxes, three gather warps copy the tile's token rows (cp.async, no permuted copy of the
// activations) into the same 128-byte swizzle, and two consumer warpgroups run wgmma on each
// stage. One stage holds 128 bytes of K per row (bf16: 64 elements, e4m3: 128).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"
#include "ptx/cp_async.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "stepfun/sm90/tile_config.h"
#include "stepfun/sm90/tile_scheduler.cuh"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

/// What a family's operands are to the main loop.
template <Family F>
struct SsOperands;

template <>
struct SsOperands<Family::kBF16> {
  static constexpr int kElemBytes = 2;
  static constexpr bool kPromote = false;
  template <int N>
  using Mma = ptx::WgmmaBf16SS<N>;
};

template <>
struct SsOperands<Family::kFP8> {
  static constexpr int kElemBytes = 1;
  // NOTE: Hopper's e4m3 wgmma keeps fewer accumulator bits than fp32; each stage's partial sum
  // (K = 128) is added into fp32 registers (the promotion DeepGEMM does) so K = 4096 stays exact
  // to fp32 rounding.
  static constexpr bool kPromote = true;
  template <int N>
  using Mma = ptx::WgmmaE4m3SS<N>;
};

/// Shared-memory carve-up of one CTA with `S` stages (offsets from the 1024-aligned base): the
/// main units' S = stages_for(N); the persistent units' layout extends it with fewer.
template <int N, int S = stages_for(N)>
struct SmemLayout {
  static constexpr int kStages = S;
  static constexpr int kA = 0;
  static constexpr int kB = kStages * a_stage_bytes();
  static constexpr int kFull = kB + kStages * b_stage_bytes(N);
  static constexpr int kEmpty = kFull + kStages * 8;
  static constexpr int kRowSrc = kEmpty + kStages * 8;
  static constexpr int kEnd = kRowSrc + N * 4;  ///< first byte past the layout
  static_assert(S != stages_for(N) || kEnd + 1024 <= smem_bytes(N),
                "tile_config.h smem_bytes is too small");
};

/// A ring's position (the stage pipeline's, or the dequant path's raw token ring): index and the
/// parity of its current phase.
struct PipeState {
  int stage = 0;
  uint32_t phase = 0;
  CAKEMOE_DEVICE void advance(int stages) {
    if (++stage == stages) stage = 0, phase ^= 1;
  }
};

/// One TMA load of the 128-row weight box of stage k: bf16 weights are BlockMajorK
/// [E * K/64, rows, 64] (3-D map), e4m3 weights row-major [E * rows, K] (2-D map).
template <Family F>
CAKEMOE_DEVICE void load_weight_box(uint8_t* dst, const CUtensorMap* map, uint64_t* bar,
                                    const TileWork& w, int num_k, int64_t rows, int k,
                                    uint64_t policy) {
  const int32_t m0 = w.m_block * kBlockM;
  if constexpr (F == Family::kBF16) {
    ptx::tma_load_3d(dst, map, bar, 0, m0, w.expert * num_k + k, policy);
  } else {
    ptx::tma_load_2d(dst, map, bar, k * kRowBytes, static_cast<int32_t>(w.expert * rows + m0),
                     policy);
  }
}

/// Producer, TMA thread: one 128-row x 128-byte weight box per stage, from the pipeline's
/// position `ps` on (a persistent CTA carries it from one tile to the next).
template <Family F, int N, class L = SmemLayout<N>>
CAKEMOE_DEVICE void produce_weights(const CUtensorMap* map, uint8_t* smem, int num_k, int64_t rows,
                                    const TileWork& w, PipeState& ps) {
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  const uint64_t policy = ptx::l2_policy_evict_first();
  for (int k = 0; k < num_k; ++k, ps.advance(L::kStages)) {
    ptx::mbarrier_wait_parity(&empty[ps.stage], ps.phase ^ 1);
    ptx::mbarrier_arrive_expect_tx(&full[ps.stage], a_stage_bytes());
    load_weight_box<F>(smem + L::kA + ps.stage * a_stage_bytes(), map, &full[ps.stage], w, num_k,
                       rows, k, policy);
  }
}

/// Producer, gather warps (kGatherThreads threads, `gtid` 0..95): per stage the tile's N rows x
/// 128 bytes of K, row r from `base + row_src[r] * row_bytes` (zeros for row_src < 0 and past the
/// row), 16-byte chunk c stored at chunk c ^ (r % 8) of row r (the 128-byte swizzle). Copies run
/// kLookahead stages ahead of their completion.
/// `extra(k, stage, gtid)` issues further cp.async copies into the stage (the e4m3 variant's token
/// scales) that complete with it.
/// NOTE: each iteration first completes stage k - kLookahead, then waits for stage k to be free:
/// the consumers free a stage only after the next one is full, so waiting first would deadlock
/// once kLookahead >= stages - 1.
struct NoTokenExtra {
  CAKEMOE_DEVICE void operator()(int, int, int) const {}
};

template <int N, class L = SmemLayout<N>, class Extra = NoTokenExtra>
CAKEMOE_DEVICE void produce_tokens(const uint8_t* base, int64_t row_bytes, const int32_t* row_src,
                                   uint8_t* smem, int num_k, int gtid, PipeState& ps,
                                   const Extra& extra = Extra()) {
  constexpr int kLookahead = L::kStages - 1 < 3 ? L::kStages - 1 : 3;
  static_assert(kLookahead >= 1, "the gather needs two stages");
  constexpr int kChunks = N * (kRowBytes / 16);
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  const int first = ps.stage;  // the stage of k is (first + k) % kStages
  for (int k = 0; k < num_k; ++k, ps.advance(L::kStages)) {
    if (k >= kLookahead) {
      ptx::cp_async_wait<kLookahead - 1>();
      ptx::fence_proxy_async_shared();
      ptx::mbarrier_arrive(&full[(first + k - kLookahead) % L::kStages]);
    }
    ptx::mbarrier_wait_parity(&empty[ps.stage], ps.phase ^ 1);
    uint8_t* stage = smem + L::kB + ps.stage * b_stage_bytes(N);
    for (int i = gtid; i < kChunks; i += kGatherThreads) {
      const int r = i / 8, c = i % 8;
      const int64_t offset = static_cast<int64_t>(k) * kRowBytes + c * 16;
      const int32_t src = row_src[r];
      const bool valid = src >= 0 && offset < row_bytes;
      const uint8_t* from = valid ? base + src * row_bytes + offset : base;
      ptx::cp_async_16(stage + r * kRowBytes + ((c ^ (r % 8)) << 4), from, valid);
    }
    extra(k, ps.stage, gtid);
    ptx::cp_async_commit();
  }
  ptx::cp_async_wait<0>();
  ptx::fence_proxy_async_shared();
  for (int k = num_k - kLookahead < 0 ? 0 : num_k - kLookahead; k < num_k; ++k) {
    ptx::mbarrier_arrive(&full[(first + k) % L::kStages]);
  }
}

/// Consumer warpgroup `group` (0, 1): acc[64 x N] = its 64 weight rows x the tile's tokens over
/// the whole K. Each warp releases a stage (lane 0 arrives on `empty`) once its wgmma reads of it
/// are complete. Starts at the pipeline's position `ps` and leaves it after the tile's stages.
template <Family F, int N, class L = SmemLayout<N>>
CAKEMOE_DEVICE void consume(uint8_t* smem, int num_k, int group, float (&acc)[N / 2],
                            PipeState& ps) {
  using Ops = SsOperands<F>;
  using Mma = typename Ops::template Mma<N>;
  constexpr int kMmas = kRowBytes / 32;  // bf16 k16 and e4m3 k32 both cover 32 bytes of a row
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  const bool lane0 = threadIdx.x % 32 == 0;
  const auto release = [&](int stage) { ptx::mbarrier_arrive(&empty[stage]); };
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  float part[Ops::kPromote ? N / 2 : 1];
#pragma unroll
  for (int i = 0; i < (Ops::kPromote ? N / 2 : 1); ++i) part[i] = 0.0f;
  int previous = -1;
  for (int k = 0; k < num_k; ++k, ps.advance(L::kStages)) {
    ptx::mbarrier_wait_parity(&full[ps.stage], ps.phase);
    const uint64_t da =
        ptx::sw128_kmajor_desc(smem + L::kA + ps.stage * a_stage_bytes() + group * 64 * kRowBytes);
    const uint64_t db = ptx::sw128_kmajor_desc(smem + L::kB + ps.stage * b_stage_bytes(N));
    if constexpr (Ops::kPromote) {
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kMmas; ++kk) {
        Mma::mma(part, ptx::desc_advance(da, kk * 32), ptx::desc_advance(db, kk * 32), kk > 0);
      }
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::fence_operands(part);
#pragma unroll
      for (int i = 0; i < N / 2; ++i) acc[i] += part[i];
      if (lane0) release(ps.stage);
    } else {
      ptx::fence_operands(acc);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kMmas; ++kk) {
        Mma::mma(acc, ptx::desc_advance(da, kk * 32), ptx::desc_advance(db, kk * 32), 1);
      }
      ptx::wgmma_commit();
      // One group stays in flight; the stage of the one before it is free.
      ptx::wgmma_wait<1>();
      ptx::fence_operands(acc);
      if (previous >= 0 && lane0) release(previous);
      previous = ps.stage;
    }
  }
  if constexpr (!Ops::kPromote) {
    ptx::wgmma_wait<0>();
    ptx::fence_operands(acc);
    if (previous >= 0 && lane0) release(previous);
  }
}

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
