// Epilogues of the sm90 GEMMs, run by the two consumer warpgroups (256 threads, named barrier 1)
// on their accumulators: values are staged in shared memory (reusing the stage buffers, free once
// both warpgroups' main loops are done) in logical column order, then stored row by row.
//   FC1 (spec §5.2): SwiGLUStep with the per-expert clamp on each (up, gate) pair a thread holds,
//     then the family's FC2-input format per 16 / 32 features (stepfun/epilogue_swiglu_step.cuh,
//     shared with the SIMT unit).
//   FC2 (spec §7.1): bf16_rn(acc * s) for the valid rows and columns < H.
// Accumulator d[4j + {0,1}] is row r0 = 16*warp + lane/4, columns 8j + 2*(lane%4) + {0,1};
// d[4j + {2,3}] the same columns of row r0 + 8 (PTX ISA wgmma m64nN D fragment).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"
#include "formats/codecs.h"
#include "ptx/sync.cuh"
#include "stepfun/epilogue_swiglu_step.cuh"
#include "stepfun/gemm_params.h"
#include "stepfun/sm90/tile_config.h"
#include "stepfun/sm90/tile_scheduler.cuh"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

constexpr int kEpilogueBarrier = 1;

template <Family F, int N>
CAKEMOE_DEVICE void fc1_epilogue(const Fc1Params& p, const TileWork& w, const int32_t* row_src,
                                 float (&acc)[N / 2], uint8_t* staging_bytes, int ctid) {
  constexpr bool kScalars = F == Family::kNVFP4 || F == Family::kNVFP4BF16Tok || F == Family::kFP8;
  constexpr int G = F == Family::kMXFP8 ? 32 : 16;  // features per quantization group
  const int group = ctid / 128, warp = (ctid / 32) % 4, lane = ctid % 32;
  const int feature = fc1_lane_feature(group, warp, lane);
  const float cl = p.clamp_limit[w.expert];
  const float sg = kScalars ? p.scale_gate[w.expert] : 1.0f;
  const float sc = kScalars ? p.scale_c[w.expert] : 1.0f;
  float* staging = reinterpret_cast<float*>(staging_bytes);
  ptx::named_barrier_sync(kEpilogueBarrier, kConsumerThreads);  // both main loops are done
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int n = 8 * j + 2 * (lane % 4) + c;
      float up = acc[4 * j + c], gate = acc[4 * j + 2 + c];
      if constexpr (F == Family::kNVFP4BF16Tok) {
        // NOTE: spec §5.2: raw accumulators times the token's decode scale first (-1 -> 0).
        const int32_t t = row_src[n];
        const float ts = t < 0 ? 0.0f : p.per_token_scale[t];
        up *= ts, gate *= ts;
      }
      staging[n * kFc1StageStride + feature] = gemm_kernels::epilogue_value<F>(up, gate, sg, sc, cl);
    }
  }
  ptx::named_barrier_sync(kEpilogueBarrier, kConsumerThreads);
  constexpr int kGroups = kFc1Features / G;
  for (int idx = ctid; idx < N * kGroups; idx += kConsumerThreads) {
    const int n = idx / kGroups, g = idx % kGroups;
    const int64_t row = w.row_begin + n;
    if (row >= w.row_end) continue;
    float v[G];
    const float4* src = reinterpret_cast<const float4*>(staging + n * kFc1StageStride + g * G);
#pragma unroll
    for (int i = 0; i < G / 4; ++i) {
      const float4 q = src[i];
      v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
    }
    gemm_kernels::store_features<F, G>(p, row, int64_t(w.m_block) * kFc1Features + g * G, v);
  }
}

template <Family F, int N>
CAKEMOE_DEVICE void fc2_epilogue(const Fc2Params& p, const TileWork& w, float (&acc)[N / 2],
                                 uint8_t* staging_bytes, int ctid) {
  constexpr bool kScalars = F == Family::kNVFP4 || F == Family::kNVFP4BF16Tok || F == Family::kFP8;
  const int group = ctid / 128, warp = (ctid / 32) % 4, lane = ctid % 32;
  const int r0 = 64 * group + 16 * warp + lane / 4;
  const int col0 = fc2_row_column(r0), col8 = fc2_row_column(r0 + 8);
  const float expert_scale = kScalars ? p.output_scale[w.expert] : 1.0f;
  auto* staging = reinterpret_cast<uint16_t*>(staging_bytes);
  ptx::named_barrier_sync(kEpilogueBarrier, kConsumerThreads);  // both main loops are done
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int n = 8 * j + 2 * (lane % 4) + c;
      const int64_t row = w.row_begin + n;
      float s = expert_scale;
      if constexpr (F == Family::kNVFP4BF16Tok) {
        // NOTE: spec §7.1: s = output2_scale_scalar[e] * per_token_scale[row].
        s = row < w.row_end ? expert_scale * p.per_token_scale[row] : 0.0f;
      }
      staging[n * kFc2StageStride + col0] = formats::bf16_from_float(acc[4 * j + c] * s);
      staging[n * kFc2StageStride + col8] = formats::bf16_from_float(acc[4 * j + 2 + c] * s);
    }
  }
  ptx::named_barrier_sync(kEpilogueBarrier, kConsumerThreads);
  const int64_t h0 = int64_t(w.m_block) * kBlockM;
  constexpr int kVectors = kBlockM / 8;  // 16-byte vectors of one staged row
  for (int idx = ctid; idx < N * kVectors; idx += kConsumerThreads) {
    const int n = idx / kVectors, v = idx % kVectors;
    const int64_t row = w.row_begin + n, col = h0 + v * 8;
    if (row >= w.row_end || col >= p.hidden) continue;
    *reinterpret_cast<uint4*>(p.output + row * p.hidden + col) =
        *reinterpret_cast<const uint4*>(staging + n * kFc2StageStride + v * 8);
  }
}

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
