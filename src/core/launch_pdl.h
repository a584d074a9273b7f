// Host side of programmatic dependent launch (PDL): a kernel launched as a programmatic dependent
// may start while the kernel before it on the stream still runs; its ptx::griddep_wait()
// (ptx/sync.cuh) then waits for that kernel to complete and flush. Every kernel launched this way
// must call griddep_wait() before it touches global memory.
#pragma once

#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/cuda_util.h"

namespace cakemoe {
namespace core {

/// Launches `kernel(args...)` on `stream`, as a programmatic dependent of the kernel before it on
/// the stream when `dependent`, in clusters of `cluster_x` CTAs along x when it is above 1 (grid.x
/// a multiple of it). A failed launch's error is cleared before the throw, so a later
/// cudaGetLastError does not report it again.
template <typename... Params, typename... Args>
inline void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool dependent, unsigned cluster_x,
                          const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2] = {};
  unsigned count = 0;
  if (dependent) {
    attribute[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster_x > 1) {
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = cluster_x;
    attribute[count].val.clusterDim.y = 1;
    attribute[count].val.clusterDim.z = 1;
    ++count;
  }
  config.attrs = attribute;
  config.numAttrs = count;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, args...);
  if (status != cudaSuccess) (void)cudaGetLastError();
  CAKEMOE_CUDA_CHECK(status);
}

/// launch_kernel without clusters.
template <typename... Params, typename... Args>
inline void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, bool dependent, const Args&... args) {
  launch_kernel(kernel, grid, block, smem, stream, dependent, 1u, args...);
}

/// Launches `kernel` as a programmatic dependent when its loaded code waits for it (compiled for
/// sm_90 or later: a compute_80 PTX unit, JIT-compiled, has no griddepcontrol and launches
/// plainly), in clusters of `cluster_x` CTAs along x (1: none).
template <typename... Params, typename... Args>
inline void launch_dependent_clustered(void (*kernel)(Params...), dim3 grid, dim3 block,
                                       size_t smem, cudaStream_t stream, unsigned cluster_x,
                                       const Args&... args) {
  launch_kernel(kernel, grid, block, smem, stream,
                kernel_waits_for_dependencies(reinterpret_cast<const void*>(kernel)), cluster_x,
                args...);
}

/// launch_dependent_clustered without clusters.
template <typename... Params, typename... Args>
inline void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, const Args&... args) {
  launch_dependent_clustered(kernel, grid, block, smem, stream, 1u, args...);
}

}  // namespace core
}  // namespace cakemoe
