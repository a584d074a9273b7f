// Host-side CUDA helpers shared by the backends, the tests and the benchmarks. Plain C++ (compiled
// by g++ against the runtime API); every call is checked and failures raise cakemoe::CudaError. In
// a build without CUDA each function throws Unsupported (device_count returns 0).
#pragma once

#include <vector>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace core {

/// Number of visible CUDA devices (0 without CUDA or without a driver).
int cuda_device_count();
/// Compute capability as major*10 + minor (90 for H100/H200).
int cuda_capability(int device_index);
/// Streaming multiprocessors of the device.
int cuda_sm_count(int device_index);
/// True when this build's native code (sm_90a, sm_100a, sm_103a) loads on the device: false on
/// other compute capabilities and when the driver ignores SASS (CUDA_FORCE_PTX_JIT=1), where
/// only units that carry compute_80 PTX run. Probed once per device.
bool cuda_native_code_loads(int device_index);
/// True when the code the driver loaded for `kernel` (a __global__ function) was compiled for
/// sm_90 or later, i.e. holds the griddepcontrol.wait a programmatic dependent launch needs
/// (false for a compute_80 PTX unit JIT-compiled, and without CUDA). Cached per kernel.
bool kernel_waits_for_dependencies(const void* kernel);
/// True when `stream` is being captured into a CUDA graph.
bool cuda_stream_capturing(Stream stream);
/// Waits for `stream` (tests and one-shot helpers only; never called inside a launch()).
void cuda_stream_sync(Stream stream);

/// Copies src to dst (same shape and dtype, both contiguous, any devices) on `stream`.
void copy_tensor(const TensorView& dst, const TensorView& src, Stream stream = nullptr);
/// A contiguous copy of `src` on `device`, synchronous.
Tensor copy_to(const TensorView& src, Device device);
/// Sets every byte of `t` to `byte` on `stream`.
void fill_bytes(const TensorView& t, int byte, Stream stream = nullptr);
/// Sets every byte of each tensor to 0 and waits for it (prepare-time workspaces: later launches
/// may come on any stream).
void zero_synchronously(const std::vector<Tensor>& tensors);

}  // namespace core
}  // namespace cakemoe
