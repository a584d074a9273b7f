// The sm90 FC1 / FC2 kernel (spec stepfun §5, §7.1) and its binder. One CTA = one routing tile x
// one 128-row weight block; 384 threads: warpgroup 0 produces (warp 0 lane 0 issues the weight
// TMA, warps 1..3 gather token rows), warpgroups 1 and 2 each multiply 64 weight rows by the
// tile's tokens with wgmma (bf16, fp8: mainloop_ss.cuh; nvfp4 families, mxfp8:
// mainloop_rs_dequant.cuh; the mxfp8 "e4m3" variant units: mainloop_mx.cuh) and run the stage's
// epilogue (epilogue.cuh).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>

#include "cakemoe/errors.h"
#include "core/cuda_check.h"
#include "core/launch_pdl.h"
#include "formats/layouts.h"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "stepfun/sm90/epilogue.cuh"
#include "stepfun/sm90/mainloop_mx.cuh"
#include "stepfun/sm90/mainloop_rs_dequant.cuh"
#include "stepfun/sm90/mainloop_ss.cuh"
#include "stepfun/sm90/params.h"
#include "stepfun/sm90/tile_config.h"
#include "stepfun/sm90/tile_scheduler.cuh"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

/// The problem as the main loop sees it, from a stage's params.
struct GemmShape {
  const uint8_t* tokens;  ///< token rows (FC1: hidden_states [T, H]; FC2: input [rows, I])
  int64_t token_row_bytes;
  int64_t weight_rows;  ///< rows of one expert's weights (FC1 2I, FC2 H)
  int num_k;            ///< stages of 128 bytes of K
};

/// Bytes of `k` elements of the family's operands (nvfp4 families: packed e2m1).
template <Family F>
CAKEMOE_HD constexpr int64_t operand_bytes(int64_t k) {
  if constexpr (is_dequant_family(F)) {
    return dq_fp4(F) ? k / 2 : k;
  } else {
    return k * SsOperands<F>::kElemBytes;
  }
}

/// Elements of K per pipeline stage.
template <Family F>
CAKEMOE_HD constexpr int stage_k() {
  if constexpr (is_dequant_family(F)) {
    return kDqStageK;
  } else {
    return kRowBytes / SsOperands<F>::kElemBytes;
  }
}

template <Family F>
CAKEMOE_HD GemmShape shape_of(const Fc1Params& p) {
  const int64_t row_bytes = operand_bytes<F>(p.hidden);
  return {static_cast<const uint8_t*>(p.hidden_states), row_bytes, 2 * p.intermediate,
          static_cast<int>((p.hidden + stage_k<F>() - 1) / stage_k<F>())};
}

template <Family F>
CAKEMOE_HD GemmShape shape_of(const Fc2Params& p) {
  const int64_t row_bytes = operand_bytes<F>(p.intermediate);
  return {static_cast<const uint8_t*>(p.input), row_bytes, p.hidden,
          static_cast<int>((p.intermediate + stage_k<F>() - 1) / stage_k<F>())};
}

/// The dequantizing main loop's view of a stage's operands, for `expert`: the shape's token rows
/// and stages plus the block scales (FC1 tokens: linear; FC2: the routing tile's layout).
template <Family F>
CAKEMOE_DEVICE DqOperands dq_operands(const Fc1Params& p, const GemmShape& s, int expert) {
  return {s.tokens,
          p.hidden_states_scale,
          SfLayout::kLinear,
          p.weights_scale +
              expert * formats::sf_size_128x4(s.weight_rows, p.hidden / dq_block_elems(F)),
          p.hidden,
          s.num_k};
}

template <Family F>
CAKEMOE_DEVICE DqOperands dq_operands(const Fc2Params& p, const GemmShape& s, int expert) {
  return {s.tokens,
          p.input_scale,
          p.input_scale_layout,
          p.weights_scale +
              expert * formats::sf_size_128x4(s.weight_rows, p.intermediate / dq_block_elems(F)),
          p.intermediate,
          s.num_k};
}

/// The main loop a unit runs: the SS one (bf16, fp8), the register dequant (nvfp4 families,
/// mxfp8) or, for the "e4m3" variant units, mxfp8 on e4m3 wgmma with per-block promotion.
enum class MainLoop { kSs, kDequant, kMxE4m3 };

template <Family F, bool kE4m3>
CAKEMOE_HD constexpr MainLoop main_loop() {
  static_assert(!kE4m3 || F == Family::kMXFP8, "the e4m3 variant is mxfp8's");
  return kE4m3 ? MainLoop::kMxE4m3 : is_dequant_family(F) ? MainLoop::kDequant : MainLoop::kSs;
}

/// Where row r of the tile's token operand comes from: FC1 the token of permuted row
/// row_begin + r, FC2 that row of gemm2_input; -1 (a zero row) past the tile's valid rows or for
/// a dropped token.
CAKEMOE_DEVICE int32_t tile_row_source(const Fc1Params& p, const TileWork& w, int r) {
  const int64_t row = w.row_begin + r;
  if (row >= w.row_end) return -1;
  const int32_t t = p.permuted_idx_to_token_idx[row];
  return t >= 0 && t < p.num_tokens ? t : -1;
}

CAKEMOE_DEVICE int32_t tile_row_source(const Fc2Params&, const TileWork& w, int r) {
  const int64_t row = w.row_begin + r;
  return row < w.row_end ? static_cast<int32_t>(row) : -1;
}

/// The CTA's dynamic shared memory from its first 1024-byte boundary (the 128-byte swizzle atom
/// of the stage buffers; the units ask for 1 KB more than their layout).
CAKEMOE_DEVICE uint8_t* swizzle_aligned_smem() {
  extern __shared__ uint8_t smem_raw[];
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                    ~uintptr_t(1023));
}

/// The stage pipeline's barriers (thread 0): a stage is full once `writers` have arrived (the
/// TMA thread with its bytes, the token writers), empty once `releases` consumer arrivals have.
CAKEMOE_DEVICE void init_stage_barriers(uint64_t* full, uint64_t* empty, int stages, int writers,
                                        int releases) {
  for (int s = 0; s < stages; ++s) {
    ptx::mbarrier_init(&full[s], writers);
    ptx::mbarrier_init(&empty[s], releases);
  }
}

/// Dynamic shared memory of a unit.
template <Family F, int N, bool kE4m3 = false>
CAKEMOE_HD constexpr int unit_smem_bytes() {
  if constexpr (kE4m3) {
    return mx_smem_bytes(N);
  } else if constexpr (is_dequant_family(F)) {
    return dq_smem_bytes(F, N);
  } else {
    return smem_bytes(N);
  }
}

/// kGroup: tiles per raster group (tile_config.h cta_coord).
template <Family F, bool kFc1, int N, bool kE4m3 = false, int kGroup = 1>
__global__ void __launch_bounds__(kThreads, ctas_per_sm(N)) sm90_gemm_kernel(
    const __grid_constant__ GemmParams<std::conditional_t<kFc1, Fc1Params, Fc2Params>> params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr MainLoop kLoop = main_loop<F, kE4m3>();
  using L = std::conditional_t<
      kLoop == MainLoop::kMxE4m3, MxLayout<N>,
      std::conditional_t<kLoop == MainLoop::kDequant, DqLayout<F, N>, SmemLayout<N>>>;
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  const auto& p = params.p;
  const int64_t id = linear_cta();
  TileWork w;
  const bool has_work = tile_work_at(p.tables, p.num_experts, params.m_blocks, kGroup, id, &w);
  if (!has_work) return;

  uint8_t* smem = swizzle_aligned_smem();
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  auto* empty = reinterpret_cast<uint64_t*>(smem + L::kEmpty);
  auto* row_src = reinterpret_cast<int32_t*>(smem + L::kRowSrc);
  const GemmShape shape = shape_of<F>(p);
  const int tid = threadIdx.x;

  // Init barriers and the tile's row sources (-1: a zero row)
  if (tid == 0) {
    // The stage is full once the TMA thread's bytes and every token writer have arrived.
    constexpr int kTokenWriters = kLoop == MainLoop::kDequant ? kDqConvertThreads : kGatherThreads;
    constexpr int kReleases = kLoop == MainLoop::kSs        ? kConsumerWarps
                              : kLoop == MainLoop::kDequant ? kDqEmptyArrivals
                                                            : kMxEmptyArrivals;
    init_stage_barriers(full, empty, L::kStages, 1 + kTokenWriters, kReleases);
    if constexpr (kLoop == MainLoop::kDequant) {
      for (int s = 0; s < L::kRing; ++s) {
        ptx::mbarrier_init(reinterpret_cast<uint64_t*>(smem + L::kRingFull) + s, kDqCopyThreads);
        ptx::mbarrier_init(reinterpret_cast<uint64_t*>(smem + L::kRingEmpty) + s,
                           kDqConvertThreads);
      }
    }
    ptx::fence_barrier_init();
  }
  if (tid < N) row_src[tid] = tile_row_source(p, w, tid);
  __syncthreads();

  PipeState ps;  // the stage pipeline's position, per role
  if (tid < 128) {
    // Producer warpgroup
    if constexpr (kLoop == MainLoop::kMxE4m3) {
      const DqOperands op = dq_operands<F>(p, shape, w.expert);
      if (tid == 0) {
        dq_produce_weights<F, N, L>(&params.weights_map, smem, op, shape.weight_rows, w);
      } else if (tid >= 32) {
        produce_tokens<N, L>(shape.tokens, shape.token_row_bytes, row_src, smem, shape.num_k,
                             tid - 32, ps, MxTokenScales<N>{&op, row_src, smem});
      }
    } else if constexpr (kLoop == MainLoop::kDequant) {
      const DqOperands op = dq_operands<F>(p, shape, w.expert);
      if (tid == 0) {
        dq_produce_weights<F, N>(&params.weights_map, smem, op, shape.weight_rows, w);
      } else if (tid >= 32 && tid < 32 + kDqCopyThreads) {
        dq_copy_tokens<F, N>(op, row_src, smem, tid - 32);
      } else if (tid >= 32 + kDqCopyThreads) {
        dq_convert_tokens<F, N>(smem, op, tid - 32 - kDqCopyThreads);
      }
    } else {
      if (tid == 0) {
        produce_weights<F, N>(&params.weights_map, smem, shape.num_k, shape.weight_rows, w, ps);
      } else if (tid >= 32) {
        produce_tokens<N>(shape.tokens, shape.token_row_bytes, row_src, smem, shape.num_k,
                          tid - 32, ps);
      }
    }
  } else {
    // Consumer warpgroups: main loop, then the stage's epilogue
    const int ctid = tid - 128;
    float acc[N / 2];
    if constexpr (kLoop == MainLoop::kMxE4m3) {
      mx_consume<N>(smem, dq_operands<F>(p, shape, w.expert), ctid / 128, acc);
    } else if constexpr (kLoop == MainLoop::kDequant) {
      dq_consume<F, N>(smem, dq_operands<F>(p, shape, w.expert), ctid / 128, acc);
    } else {
      consume<F, N>(smem, shape.num_k, ctid / 128, acc, ps);
    }
    if constexpr (kFc1) {
      fc1_epilogue<F, N>(p, w, row_src, acc, smem, ctid);
    } else {
      fc2_epilogue<F, N>(p, w, acc, smem, ctid);
    }
  }
#endif
}

#if defined(__CUDACC__)
/// The weights' TMA map: bf16 BlockMajorK [E * K/64, rows, 64] elements as a 3-D map with a
/// (64, 128, 1) box; e4m3 [E * rows, K] bytes as a 2-D map with a (128, 128) box; both in the
/// 128-byte swizzle that sw128_kmajor_desc describes. Packed e2m1 [E * rows, K/2] bytes: a 2-D
/// map with a (64, 128) box, unswizzled (consumers read rows, not wgmma). Out-of-range rows / K
/// read as zeros.
template <Family F>
CUtensorMap make_weights_map(const void* weights, int64_t experts, int64_t rows, int64_t k) {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    CAKEMOE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                        cudaEnableDefault, &status));
    return reinterpret_cast<CUresult (*)(
        CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
        const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
        CUtensorMapL2promotion, CUtensorMapFloatOOBfill)>(fn);
  }();
  CUtensorMap map{};
  CUresult r;
  if constexpr (F == Family::kBF16) {
    const cuuint64_t dims[3] = {64, cuuint64_t(rows), cuuint64_t(experts * (k / 64))};
    const cuuint64_t strides[2] = {128, cuuint64_t(rows) * 128};
    const cuuint32_t box[3] = {64, cuuint32_t(kBlockM), 1};
    const cuuint32_t unit[3] = {1, 1, 1};
    r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(weights), dims, strides,
               box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  } else if constexpr (is_dequant_family(F)) {
    const cuuint64_t row_bytes = dq_fp4(F) ? k / 2 : k;
    const cuuint64_t dims[2] = {row_bytes, cuuint64_t(experts * rows)};
    const cuuint64_t strides[1] = {row_bytes};
    const cuuint32_t box[2] = {cuuint32_t(dq_raw_row_bytes(F)), cuuint32_t(kBlockM)};
    const cuuint32_t unit[2] = {1, 1};
    // e2m1 rows (64 B) are read conflict-free unswizzled; e4m3 rows (128 B) need the swizzle.
    r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(weights), dims, strides,
               box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
               dq_fp4(F) ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  } else {
    const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(experts * rows)};
    const cuuint64_t strides[1] = {cuuint64_t(k)};
    const cuuint32_t box[2] = {kRowBytes, cuuint32_t(kBlockM)};
    const cuuint32_t unit[2] = {1, 1};
    r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(weights), dims, strides,
               box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  if (r != CUDA_SUCCESS) {
    throw CudaError("cuTensorMapEncodeTiled", "the sm90 weights map was rejected (CUresult " +
                                                  std::to_string(static_cast<int>(r)) + ")");
  }
  return map;
}

/// The dequantizing main loop copies token scale bytes in 4-byte pieces and bulk-copies 512-byte
/// weight scale groups: their bases must allow it. (Token rows move in 16-byte pieces; the stage
/// binders in cuda_gemm.cpp already require that alignment of hidden_states / gemm2_input.)
inline void check_dq_scale_alignment(const uint8_t* token_scale, const char* token_scale_arg,
                                     const uint8_t* weights_scale, const char* weights_scale_arg) {
  const auto need = [](const uint8_t* ptr, uintptr_t bytes, const char* arg) {
    if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0) {
      throw Unsupported(arg, "the sm90 dequantizing units need it " + std::to_string(bytes) +
                                 "-byte aligned; pass a portable plan for such views");
    }
  };
  need(token_scale, 4, token_scale_arg);
  need(weights_scale, 16, weights_scale_arg);
}

template <Family F>
void check_dq_alignment(const Fc1Params& p) {
  // NOTE: mxfp8's linear [T, H/32] scales give 4-byte pieces only when H / 32 is a multiple of 4.
  if (!sm90_supports_shape(F, p.hidden)) {
    throw Unsupported("hidden_states_scale",
                      "the sm90 mxfp8 FC1 needs a hidden size that is a multiple of 128; pass a "
                      "portable plan");
  }
  check_dq_scale_alignment(p.hidden_states_scale, "hidden_states_scale", p.weights_scale,
                           "gemm1_weights_scale");
}

template <Family F>
void check_dq_alignment(const Fc2Params& p) {
  check_dq_scale_alignment(p.input_scale, "gemm2_input_scale", p.weights_scale,
                           "gemm2_weights_scale");
}

/// The kernel parameters of a stage for the sm90 units: the shape checks the units need beyond
/// the stage's validation, the weights' tensor map (encoded here, once) and the weight blocks.
template <Family F, bool kFc1>
GemmParams<std::conditional_t<kFc1, Fc1Params, Fc2Params>> sm90_gemm_params(
    const std::conditional_t<kFc1, Fc1Params, Fc2Params>& p) {
  GemmParams<std::conditional_t<kFc1, Fc1Params, Fc2Params>> params;
  params.p = p;
  const GemmShape shape = shape_of<F>(p);
  const int64_t k_elems = kFc1 ? p.hidden : p.intermediate;
  if constexpr (is_dequant_family(F)) check_dq_alignment<F>(p);
  if constexpr (F != Family::kBF16) {
    // NOTE: the 2-D weight maps address row expert * rows + m0 with a 32-bit TMA coordinate.
    if (p.num_experts * shape.weight_rows > int64_t{0x7fffffff}) {
      throw Unsupported(kFc1 ? "gemm1_weights" : "gemm2_weights",
                        "the sm90 units need experts x rows below 2^31 (32-bit TMA "
                        "coordinates); pass a portable plan");
    }
  }
  params.weights_map = make_weights_map<F>(p.weights, p.num_experts, shape.weight_rows, k_elems);
  const int64_t m_blocks =
      kFc1 ? shape.weight_rows / kBlockM : (shape.weight_rows + kBlockM - 1) / kBlockM;
  params.m_blocks = static_cast<int32_t>(m_blocks);
  return params;
}

/// Lets `kernel` take `bytes` of dynamic shared memory (the caller keeps it to once per kernel).
inline bool allow_smem(const void* kernel, int bytes) {
  CAKEMOE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return true;
}

/// Binder (stepfun/gemm_params.h GemmBinder): the tensor map is encoded here, once; the closure
/// only enqueues (no allocation, no host synchronisation, graph-capturable).
template <Family F, bool kFc1, int N, bool kE4m3 = false, int kGroup = 1>
GemmEnqueue bind_sm90_gemm(const std::conditional_t<kFc1, Fc1Params, Fc2Params>& p) {
  static const bool configured =
      allow_smem(reinterpret_cast<const void*>(sm90_gemm_kernel<F, kFc1, N, kE4m3, kGroup>),
                 unit_smem_bytes<F, N, kE4m3>());
  (void)configured;
  const auto params = sm90_gemm_params<F, kFc1>(p);
  // NOTE: max_ctas < 2^31 and m_blocks <= 2^14 (H, 2I <= 2^21): the product fits the 2-D grid.
  const LinearGrid g = linear_grid(grid_ctas(p.tables.max_ctas, params.m_blocks, kGroup));
  const dim3 grid(g.x, g.y);
  return [params, grid](Stream stream) {
    core::launch_dependent(sm90_gemm_kernel<F, kFc1, N, kE4m3, kGroup>, grid, dim3(kThreads),
                           unit_smem_bytes<F, N, kE4m3>(), static_cast<cudaStream_t>(stream),
                           params);
  };
}
#endif  // __CUDACC__

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
