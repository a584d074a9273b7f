// Event timing of host-enqueued GPU work, shared by the GEMM timing test and its benchmark
// (header-only, no gtest: bench/ includes it too).
#pragma once

#include <cuda_runtime_api.h>

#include "core/cuda_check.h"

namespace cakemoe {
namespace gpu_testbed {

/// Mean milliseconds of `body()` (which enqueues on the legacy default stream) over `iterations`
/// calls, after one warm-up call, measured with CUDA events.
template <typename F>
double time_ms(const F& body, int iterations) {
  cudaEvent_t start, stop;
  CAKEMOE_CUDA_CHECK(cudaEventCreate(&start));
  CAKEMOE_CUDA_CHECK(cudaEventCreate(&stop));
  body();  // warm-up
  CAKEMOE_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < iterations; ++i) body();
  CAKEMOE_CUDA_CHECK(cudaEventRecord(stop));
  CAKEMOE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CAKEMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iterations;
}

}  // namespace gpu_testbed
}  // namespace cakemoe
