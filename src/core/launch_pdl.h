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
/// the stream when `dependent`. A failed launch's error is cleared before the throw, so a later
/// cudaGetLastError does not report it again.
template <typename... Params, typename... Args>
inline void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, bool dependent, const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {};
  if (dependent) {
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attribute;
  config.numAttrs = dependent ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, args...);
  if (status != cudaSuccess) (void)cudaGetLastError();
  CAKEMOE_CUDA_CHECK(status);
}

/// Launches `kernel` as a programmatic dependent when its loaded code waits for it (compiled for
/// sm_90 or later: a compute_80 PTX unit, JIT-compiled, has no griddepcontrol and launches
/// plainly).
template <typename... Params, typename... Args>
inline void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, const Args&... args) {
  launch_pdl(kernel, grid, block, smem, stream,
             kernel_waits_for_dependencies(reinterpret_cast<const void*>(kernel)), args...);
}

}  // namespace core
}  // namespace cakemoe
