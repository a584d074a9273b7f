// Owning device arrays for the GPU tests that drive kernels through raw pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "core/cuda_check.h"

namespace cakemoe {
namespace gpu_testbed {

/// Owning device array (poisoned with 0xFF bytes unless uploaded).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : size_(n) {
    CAKEMOE_CUDA_CHECK(cudaMalloc(&ptr_, bytes()));
    fill(0xFF);
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T) > 0 ? size_ * sizeof(T) : 1; }
  void upload(const std::vector<T>& host) {
    CAKEMOE_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T),
                                  cudaMemcpyHostToDevice));
    // NOTE: kernels on a non-blocking stream (the BGMV ones) do not order after the legacy
    // default stream; a device-wide sync makes the copy (and fill below) visible to them.
    CAKEMOE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    CAKEMOE_CUDA_CHECK(cudaDeviceSynchronize());
    CAKEMOE_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void fill(int byte) {
    CAKEMOE_CUDA_CHECK(cudaMemset(ptr_, byte, bytes()));
    CAKEMOE_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gpu_testbed
}  // namespace cakemoe
