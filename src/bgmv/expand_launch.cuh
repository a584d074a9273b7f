// Host side of a Cake expand kernel unit: picks the (dtype, schedule) instantiation of one rank and
// launches it, as a programmatic dependent of the shrink when pdl_mode != 0 (spec §4.3, §4.4).
// Included by the inst/bgmv_cake_expand_r*.cu units only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_launch.h"
#include "bgmv/expand_cake.cuh"
#include "cakemoe/errors.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

template <bool kFp16, int kRank, int kCols>
void launch_expand_instance(const CakeParams& p, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim =
      dim3(static_cast<unsigned>(p.T), static_cast<unsigned>((p.H + kCols - 1) / kCols));
  config.blockDim = dim3(kCols);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = p.pdl_mode != 0 ? 1 : 0;
  CAKEMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, cake_expand_kernel<kFp16, kRank, kCols>, p));
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

/// The unit launcher: schedule 0 = 64 threads x 64 columns, 1 = 128 x 128; dtype 0 bf16, 1 fp16.
template <int kRank>
void launch_cake_expand_rank(const CakeParams& p, void* stream) {
  if (p.R != kRank) throw InvalidArgument("rank", "the expand unit was built for another rank");
  if (p.schedule_id != 0 && p.schedule_id != 1) {
    throw Unsupported("schedule_id", "the generic expand has schedules 0 and 1");
  }
  if (p.T <= 0 || p.H <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const bool wide = p.schedule_id == 1;
  if (p.dtype == 1) {
    wide ? launch_expand_instance<true, kRank, 128>(p, s)
         : launch_expand_instance<true, kRank, 64>(p, s);
  } else {
    wide ? launch_expand_instance<false, kRank, 128>(p, s)
         : launch_expand_instance<false, kRank, 64>(p, s);
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
