// CUDA FC2 of spec stepfun §7.1: one CTA per (128 output columns, token tile); the permuted FC1
// output rows (nvfp4_bf16tok: the requant output) go through the shared SIMT tile in chunks and
// gemm2_output[row, h] = bf16_rn(acc * s) is written for the valid rows only. K = I needs only
// I % 32 == 0 (no remainder tile), so I = 1280, 640, 320 run like 1536.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/launch_pdl.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "ptx/sync.cuh"
#include "stepfun/gemm_params.h"
#include "stepfun/gemm_tile.cuh"

namespace cakemoe {
namespace stepfun {
namespace gemm_kernels {

template <Family F, int TM>
__global__ void __launch_bounds__(kThreads, 2) fc2_kernel(const Fc2Params p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  constexpr Fmt kFmt = fmt_of(F);
  using T = Tile<TM>;
  constexpr bool kScalars = F == Family::kNVFP4 || F == Family::kNVFP4BF16Tok || F == Family::kFP8;
  __shared__ __align__(16) float smem[T::kSmemFloats];
  __shared__ int slot[kBN];
  __shared__ int32_t row_src[T::kBM];  // permuted row of each chunk row, -1 = zero row

  TileRows tr;
  if (!tile_rows(p.tables, p.num_experts, &tr)) return;
  const int tid = threadIdx.x, tx = tid % 32, ty = tid / 32;
  const int64_t hidden = p.hidden, h0 = static_cast<int64_t>(blockIdx.y) * kBN;
  // H is a multiple of 64: the last block may hold 64 columns.
  const int cols = hidden - h0 < kBN ? static_cast<int>(hidden - h0) : kBN;
  for (int j = tid; j < kBN; j += kThreads) {
    // NOTE: spec §4.4 (b): the 32-row shuffle keeps every aligned block on its own rows.
    slot[j] = j < cols ? static_cast<int>(formats::w2_logical_row(h0 + j) - h0) : j;
  }
  const WeightOperand w =
      weight_of_expert<kFmt>(p.weights, p.weights_scale, tr.expert, hidden, p.intermediate);
  const RowOperand a{static_cast<const uint8_t*>(p.input), p.input_scale, p.input_scale_layout,
                     p.intermediate};
  const float expert_scale = kScalars ? p.output_scale[tr.expert] : 1.0f;

  for (int64_t c0 = tr.row_begin; c0 < tr.row_end; c0 += T::kBM) {
    __syncthreads();  // every thread is past the previous chunk's reads of row_src
    if (tid < T::kBM) {
      const int64_t row = c0 + tid;
      row_src[tid] = row < tr.row_end ? static_cast<int32_t>(row) : -1;
    }
    __syncthreads();
    float acc[TM][4];
    gemm_chunk<TM, kFmt, kFmt>(a, row_src, w, h0, cols, slot, smem, acc);
    const int col = tx * 4;
    if (col >= cols) continue;
    for (int i = 0; i < TM; ++i) {
      const int64_t row = c0 + ty * TM + i;
      if (row >= tr.row_end) continue;
      // NOTE: spec §7.1: nvfp4_bf16tok s = output2_scale_scalar[e] * per_token_scale[row].
      const float s =
          F == Family::kNVFP4BF16Tok ? expert_scale * p.per_token_scale[row] : expert_scale;
      const uint32_t lo = uint32_t(formats::bf16_from_float(acc[i][0] * s)) |
                          (uint32_t(formats::bf16_from_float(acc[i][1] * s)) << 16);
      const uint32_t hi = uint32_t(formats::bf16_from_float(acc[i][2] * s)) |
                          (uint32_t(formats::bf16_from_float(acc[i][3] * s)) << 16);
      *reinterpret_cast<uint2*>(p.output + row * hidden + h0 + col) = make_uint2(lo, hi);
    }
  }
}

#if defined(__CUDACC__)
/// Launches the family's kernel: grid (max_ctas token tiles, ceil(H/128) column blocks).
template <Family F>
void launch_fc2(const Fc2Params& p, Stream stream) {
  const dim3 grid(static_cast<unsigned>(p.tables.max_ctas),
                  static_cast<unsigned>((p.hidden + kBN - 1) / kBN));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  with_tm_for_tile(p.tables.tile, [&](auto tm) {
    core::launch_dependent(fc2_kernel<F, decltype(tm)::value>, grid, dim3(kThreads), 0, s, p);
  });
}

/// The family's binder (Fc2Binder): captures the params; the closure launches.
template <Family F>
GemmEnqueue bind_fc2(const Fc2Params& p) {
  return [p](Stream stream) { launch_fc2<F>(p, stream); };
}
#endif  // __CUDACC__: launches need nvcc

}  // namespace gemm_kernels
}  // namespace stepfun
}  // namespace cakemoe
