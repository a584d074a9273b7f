// Whether this build's native code (sm_90a / sm_100a / sm_103a SASS) runs on a device. A device of
// a listed compute capability normally loads it, but the driver can be told to ignore SASS
// (CUDA_FORCE_PTX_JIT=1); then only units carrying compute_80 PTX run, as on any other device.
// The probe kernel is built like every portable unit without PTX, so it loads exactly when
// native code does.
#include <cuda_runtime_api.h>

#include <atomic>

#include "core/cuda_check.h"
#include "core/cuda_util.h"

namespace cakemoe {
namespace core {
namespace {

__global__ void native_probe_kernel() {}

constexpr int kCachedDevices = 64;
// 0: not probed yet, 1: loads, 2: does not load.
std::atomic<int> probe_cache[kCachedDevices];

bool probe(int device_index) {
  int current = 0;
  CAKEMOE_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_index) CAKEMOE_CUDA_CHECK(cudaSetDevice(device_index));
  cudaFuncAttributes attributes{};
  const cudaError_t status =
      cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&native_probe_kernel));
  if (status != cudaSuccess) cudaGetLastError();  // not sticky: leave no error behind
  if (current != device_index) CAKEMOE_CUDA_CHECK(cudaSetDevice(current));
  if (status == cudaErrorNoKernelImageForDevice || status == cudaErrorInvalidDeviceFunction) {
    return false;
  }
  CAKEMOE_CUDA_CHECK(status);
  return true;
}

}  // namespace

bool cuda_native_code_loads(int device_index) {
  if (device_index < 0 || device_index >= kCachedDevices) return probe(device_index);
  std::atomic<int>& slot = probe_cache[device_index];
  int state = slot.load(std::memory_order_relaxed);
  if (state == 0) {
    state = probe(device_index) ? 1 : 2;
    slot.store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

}  // namespace core
}  // namespace cakemoe
