// Kernel parameters of the sm90 FC1 / FC2 units: the validated device pointers of the SIMT units
// (stepfun/gemm_params.h) plus the TMA tensor map of the weights, built once when the stage is
// bound (prepare time) and passed by value as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>

#include "stepfun/gemm_params.h"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

template <class StageParams>
struct GemmParams {
  CUtensorMap weights_map;  ///< 64-byte aligned by its type
  StageParams p;
  int32_t m_blocks;  ///< 128-row weight blocks per expert (CTAs per token tile)
};

using Fc1GemmParams = GemmParams<Fc1Params>;
using Fc2GemmParams = GemmParams<Fc2Params>;

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
