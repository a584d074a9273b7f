// CUDA FC1 of spec stepfun §5: one CTA per (64 output features = 128 physical W1 rows, token
// tile); the gathered rows go through the shared SIMT tile (gemm_tile.cuh) in chunks, the fp32
// accumulators are staged in shared memory in logical order ([0, 64) up, [64, 128) gate) and the
// SwiGLUStep epilogue (§5.2) quantizes each row's features into the family's FC2-input format.
// Only valid rows [n*tile, mn_limit[n]) and their scale bytes are written.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/launch_pdl.h"
#include "formats/layouts.h"
#include "ptx/sync.cuh"
#include "stepfun/epilogue_swiglu_step.cuh"
#include "stepfun/gemm_params.h"
#include "stepfun/gemm_tile.cuh"

namespace cakemoe {
namespace stepfun {
namespace gemm_kernels {

template <Family F, int TM>
__global__ void __launch_bounds__(kThreads, 2) fc1_kernel(const Fc1Params p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  constexpr Fmt kFmt = fmt_of(F);
  using T = Tile<TM>;
  constexpr bool kScalars = F == Family::kNVFP4 || F == Family::kNVFP4BF16Tok || F == Family::kFP8;
  constexpr int G = F == Family::kMXFP8 ? 32 : 16;  // features per quantization group
  __shared__ __align__(16) float smem[T::kSmemFloats];
  __shared__ int slot[kBN];
  __shared__ int32_t row_src[T::kBM];  // token of each chunk row, -1 = zero row

  TileRows tr;
  if (!tile_rows(p.tables, p.num_experts, &tr)) return;
  const int tid = threadIdx.x, tx = tid % 32, ty = tid / 32;
  const int64_t inter = p.intermediate, block = blockIdx.y;
  for (int j = tid; j < kBN; j += kThreads) {
    // NOTE: spec §4.4 (a)+(b): the 128 physical rows of a block hold up and gate of the same
    // 64 features; slot = logical feature (up) or 64 + feature (gate) within the block.
    const int64_t logical = formats::w1_logical_row(block * kBN + j, inter);
    slot[j] = static_cast<int>(logical < inter ? logical - block * kFeatures
                                               : kFeatures + logical - inter - block * kFeatures);
  }
  const WeightOperand w =
      weight_of_expert<kFmt>(p.weights, p.weights_scale, tr.expert, 2 * inter, p.hidden);
  const RowOperand a{static_cast<const uint8_t*>(p.hidden_states), p.hidden_states_scale,
                     SfLayout::kLinear, p.hidden};
  const float cl = p.clamp_limit[tr.expert];
  const float sg = kScalars ? p.scale_gate[tr.expert] : 1.0f;
  const float sc = kScalars ? p.scale_c[tr.expert] : 1.0f;

  for (int64_t c0 = tr.row_begin; c0 < tr.row_end; c0 += T::kBM) {
    __syncthreads();  // the previous chunk's epilogue is done with smem and row_src
    if (tid < T::kBM) {
      const int64_t row = c0 + tid;
      int32_t src = -1;
      if (row < tr.row_end) {
        const int32_t t = p.permuted_idx_to_token_idx[row];
        if (t >= 0 && t < p.num_tokens) src = t;  // -1 (and any bad index) reads a zero row
      }
      row_src[tid] = src;
    }
    __syncthreads();
    float acc[TM][4];
    gemm_chunk<TM, kFmt, kFmt>(a, row_src, w, block * kBN, kBN, slot, smem, acc);
    for (int i = 0; i < TM; ++i) {
      *reinterpret_cast<float4*>(smem + (ty * TM + i) * kBStride + tx * 4) =
          make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
    __syncthreads();
    constexpr int kGroups = kFeatures / G;
    for (int idx = tid; idx < T::kBM * kGroups; idx += kThreads) {
      const int r = idx / kGroups, g = idx % kGroups;
      const int64_t row = c0 + r;
      if (row >= tr.row_end) continue;
      const float* up = smem + r * kBStride + g * G;
      const float* gate = up + kFeatures;
      float v[G];
      if constexpr (F == Family::kNVFP4BF16Tok) {
        // NOTE: spec §5.2: raw accumulators times the token's decode scale first (-1 -> 0).
        const int32_t t = row_src[r];
        const float ts = t < 0 ? 0.0f : p.per_token_scale[t];
        for (int j = 0; j < G; ++j) {
          v[j] = epilogue_value<F>(up[j] * ts, gate[j] * ts, sg, sc, cl);
        }
      } else {
        for (int j = 0; j < G; ++j) v[j] = epilogue_value<F>(up[j], gate[j], sg, sc, cl);
      }
      store_features<F, G>(p, row, block * kFeatures + g * G, v);
    }
  }
}

#if defined(__CUDACC__)
/// Launches the family's kernel: grid (max_ctas token tiles, I/64 feature blocks).
template <Family F>
void launch_fc1(const Fc1Params& p, Stream stream) {
  const dim3 grid(static_cast<unsigned>(p.tables.max_ctas),
                  static_cast<unsigned>(p.intermediate / kFeatures));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  with_tm_for_tile(p.tables.tile, [&](auto tm) {
    core::launch_dependent(fc1_kernel<F, decltype(tm)::value>, grid, dim3(kThreads), 0, s, p);
  });
}

/// The family's binder (Fc1Binder): captures the params; the closure launches.
template <Family F>
GemmEnqueue bind_fc1(const Fc1Params& p) {
  return [p](Stream stream) { launch_fc1<F>(p, stream); };
}
#endif  // __CUDACC__: launches need nvcc

}  // namespace gemm_kernels
}  // namespace stepfun
}  // namespace cakemoe
