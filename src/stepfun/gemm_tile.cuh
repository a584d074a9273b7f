// The SIMT fp32 tile shared by the FC1 and FC2 kernels: a CTA of 256 threads computes a chunk of
// BM = 8*TM token rows x 128 weight rows. Each K step (32 elements) decodes the gathered A rows and
// the 128 weight rows into shared memory in accumulator units (exact in fp32), then every thread
// accumulates TM rows x 4 columns with fmaf while the next step's raw bytes load into registers.
// Weight rows are stored at their logical column
// (`slot`), so accumulator column c is logical output c of the CTA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "stepfun/gemm_operands.cuh"
#include "stepfun/gemm_params.h"

namespace cakemoe {
namespace stepfun {
namespace gemm_kernels {

constexpr int kThreads = 256;
constexpr int kBN = 128;           ///< weight rows (output columns) per CTA
constexpr int kBK = 32;            ///< K elements per shared-memory step
constexpr int kBStride = kBN + 4;  // keeps float4 alignment; staging rows use it too

template <int TM>
struct Tile {
  static constexpr int kBM = 8 * TM;  ///< token rows per chunk (8 row groups of TM)
  static constexpr int kAStride = kBM + 4;
  static constexpr int kAFloats = kBK * kAStride;
  static constexpr int kBFloats = kBK * kBStride;
  static constexpr int kStageFloats = kBM * kBStride;
  static constexpr int kSmemFloats =
      kAFloats + kBFloats > kStageFloats ? kAFloats + kBFloats : kStageFloats;
};

/// Rows per thread for a tile: the largest chunk (up to 64 rows) that a tile fills.
__host__ __device__ inline int tm_for_tile(int64_t tile) {
  return tile >= 64 ? 8 : tile >= 32 ? 4 : tile >= 16 ? 2 : 1;
}

/// Calls fn(std::integral_constant<int, TM>{}) for TM = tm_for_tile(tile): the FC1 / FC2
/// launchers pick their kernel instance with it.
template <class Fn>
inline void with_tm_for_tile(int64_t tile, Fn&& fn) {
  switch (tm_for_tile(tile)) {
    case 1:
      fn(std::integral_constant<int, 1>{});
      break;
    case 2:
      fn(std::integral_constant<int, 2>{});
      break;
    case 4:
      fn(std::integral_constant<int, 4>{});
      break;
    default:
      fn(std::integral_constant<int, 8>{});
      break;
  }
}

/// acc[i][j] = sum_k A[row_src[ty*TM + i], k] * W[w_row0 + jj, k] over the whole K, where
/// jj is the weight row whose slot is tx*4 + j. row_src[r] < 0 reads a zero row; weight rows
/// jj >= w_rows_valid read as zeros. Ends with a barrier: `smem` is free on return.
template <int TM, Fmt FA, Fmt FW>
__device__ __forceinline__ void gemm_chunk(const RowOperand& a, const int32_t* row_src,
                                           const WeightOperand& w, int64_t w_row0, int w_rows_valid,
                                           const int* slot, float* smem, float (&acc)[TM][4]) {
  using T = Tile<TM>;
  float* as = smem;                // [kBK][kAStride]: k-major token rows
  float* bs = smem + T::kAFloats;  // [kBK][kBStride]: k-major weight slots
  const int tid = threadIdx.x, tx = tid % 32, ty = tid / 32;
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  constexpr int kAItems = (T::kBM * (kBK / 8) + kThreads - 1) / kThreads;
  constexpr int kBItems = kBN * (kBK / 8) / kThreads;
  // Items of 8 K elements. A: row index fastest, so consecutive lanes store consecutive words
  // (no bank conflicts); B: weight row fastest.
  Raw8 ra[kAItems], rb[kBItems];
  auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int it = 0; it < kAItems; ++it) {
      const int idx = tid + it * kThreads;
      const int r = idx % T::kBM, g = idx / T::kBM;
      const int32_t src = idx < T::kBM * (kBK / 8) ? row_src[r] : -1;
      ra[it] = src >= 0 ? fetch_row8<FA>(a, src, k0 + g * 8) : Raw8{};
    }
#pragma unroll
    for (int it = 0; it < kBItems; ++it) {
      const int idx = tid + it * kThreads;
      const int j = idx % kBN, g = idx / kBN;
      rb[it] = j < w_rows_valid ? fetch_weight8<FW>(w, w_row0 + j, k0 + g * 8) : Raw8{};
    }
  };
  auto store = [&]() {
    float v[8];
#pragma unroll
    for (int it = 0; it < kAItems; ++it) {
      const int idx = tid + it * kThreads;
      if (idx < T::kBM * (kBK / 8)) {
        const int r = idx % T::kBM, g = idx / T::kBM;
        decode8<FA>(ra[it], v);
        for (int i = 0; i < 8; ++i) as[(g * 8 + i) * T::kAStride + r] = v[i];
      }
    }
#pragma unroll
    for (int it = 0; it < kBItems; ++it) {
      const int idx = tid + it * kThreads;
      const int j = idx % kBN, g = idx / kBN;
      decode8<FW>(rb[it], v);
      const int s = slot[j];
      for (int i = 0; i < 8; ++i) bs[(g * 8 + i) * kBStride + s] = v[i];
    }
  };
  const int64_t k_total = a.cols;
  fetch(0);
  for (int64_t k0 = 0; k0 < k_total; k0 += kBK) {
    store();
    __syncthreads();
    // The next step's global loads are in flight during this step's math.
    if (k0 + kBK < k_total) fetch(k0 + kBK);
#pragma unroll 8
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 b = *reinterpret_cast<const float4*>(bs + kk * kBStride + tx * 4);
      const float* arow = as + kk * T::kAStride + ty * TM;
      float av4[TM];
      if constexpr (TM % 4 == 0) {
        // 16-byte aligned: kAStride * 4 and TM * 4 bytes are multiples of 16.
#pragma unroll
        for (int i = 0; i < TM; i += 4) {
          const float4 q = *reinterpret_cast<const float4*>(arow + i);
          av4[i] = q.x, av4[i + 1] = q.y, av4[i + 2] = q.z, av4[i + 3] = q.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < TM; ++i) av4[i] = arow[i];
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float av = av4[i];
        acc[i][0] = fmaf(av, b.x, acc[i][0]);
        acc[i][1] = fmaf(av, b.y, acc[i][1]);
        acc[i][2] = fmaf(av, b.z, acc[i][2]);
        acc[i][3] = fmaf(av, b.w, acc[i][3]);
      }
    }
    __syncthreads();
  }
}

/// The CTA's token tile: expert, valid rows [row_begin, row_end). False when the CTA exits
/// (n >= num_non_exiting_ctas, or an expert outside [0, E_loc) in a corrupted table).
struct TileRows {
  int64_t expert, row_begin, row_end;
};

__device__ __forceinline__ bool tile_rows(const GemmTileTables& t, int64_t num_experts,
                                          TileRows* out) {
  const int64_t n = blockIdx.x;
  if (n >= *t.num_non_exiting_ctas) return false;
  out->expert = t.batch[n];
  if (out->expert < 0 || out->expert >= num_experts) return false;
  out->row_begin = n * t.tile;
  // NOTE: spec §2.4: mn_limit <= (n+1)*tile; clamped so a bad table cannot reach another tile.
  const int64_t limit = t.mn_limit[n];
  out->row_end = limit < out->row_begin + t.tile ? limit : out->row_begin + t.tile;
  return true;
}

}  // namespace gemm_kernels
}  // namespace stepfun
}  // namespace cakemoe
