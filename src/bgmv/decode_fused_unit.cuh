// Host side of a fused decode kernel unit: picks the dtype instantiation of one rank and enqueues
// the single cooperative launch (src/bgmv/decode_fused.cuh), or answers the occupancy query the
// plan makes at prepare. Included by the inst/bgmv_decode_fused_r*.cu units only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "bgmv/decode_fused.cuh"
#include "bgmv/decode_fused_launch.h"
#include "cakemoe/errors.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

template <bool kFp16, int kRank>
void launch_fused_instance(const FusedDecodeParams& p, cudaStream_t stream) {
  const auto kernel = fused_decode_kernel<kFp16, kRank>;
  if (p.blocks_per_sm_out != nullptr) {
    int previous = 0;
    CAKEMOE_CUDA_CHECK(cudaGetDevice(&previous));
    CAKEMOE_CUDA_CHECK(cudaSetDevice(p.query_device));
    const cudaError_t status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        p.blocks_per_sm_out, kernel, kFusedThreads, 0);
    cudaSetDevice(previous);
    CAKEMOE_CUDA_CHECK(status);
    return;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(p.shrink_ctas + p.expand_ctas));
  config.blockDim = dim3(kFusedThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  // NOTE: co-residency of every CTA is what makes the expand's spin safe (decode_fused.cuh);
  // a cooperative launch guarantees it or fails (cudaErrorCooperativeLaunchTooLarge).
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  CAKEMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

/// The unit launcher; dtype 0 bf16, 1 fp16. Checks the grid arithmetic the spin relies on.
template <int kRank>
void launch_fused_decode_rank(const FusedDecodeParams& p, void* stream) {
  const CakeParams& c = p.cake;
  if (c.R != kRank) {
    throw InvalidArgument("rank", "the fused decode unit was built for another rank");
  }
  if (c.dtype != 0 && c.dtype != 1) {
    throw InvalidArgument("dtype",
                          "BGMV kernels take 0 (bf16) or 1 (fp16), got " + std::to_string(c.dtype));
  }
  if (p.blocks_per_sm_out == nullptr) {
    if (c.P < 1 || c.P > kFusedMaxPairs || c.T < 1 || c.H < 8) {
      throw InvalidArgument("fused_decode", "needs 1 <= P <= 128, T >= 1 and H >= 8");
    }
    if (c.splits < 1 || c.splits > kMaxSplits) {
      throw InvalidArgument("shrink_launch", "splits must be 1..8");
    }
    if (p.shrink_ctas != c.P * (kRank / kFusedRankTile) * c.splits ||
        p.expand_ctas != c.T * ((c.H + kFusedCols - 1) / kFusedCols)) {
      throw InvalidArgument("fused_decode", "grid must be P*R/8*splits + T*ceil(H/128) CTAs");
    }
  }
  const auto s = static_cast<cudaStream_t>(stream);
  if (c.dtype == 1) {
    launch_fused_instance<true, kRank>(p, s);
  } else {
    launch_fused_instance<false, kRank>(p, s);
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
