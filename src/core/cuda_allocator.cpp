// The CUDA allocator. Compiled by g++ against the CUDA runtime API when the build has CUDA.
#include "cakemoe/errors.h"
#include "cakemoe/tensor.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/cuda_check.h"
#endif

namespace cakemoe {

#if defined(CAKEMOE_WITH_CUDA)
namespace {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    int previous = 0;
    CAKEMOE_CUDA_CHECK(cudaGetDevice(&previous));
    CAKEMOE_CUDA_CHECK(cudaSetDevice(index_));
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    cudaSetDevice(previous);
    CAKEMOE_CUDA_CHECK(status);
    return p;
  }
  void deallocate(void* ptr, size_t) override { cudaFree(ptr); }
  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};

}  // namespace

Allocator* cuda_allocator(int device_index) {
  // NOTE: never destroyed: tensors held in statics are freed after main returns, and their
  // deleters must still find a live allocator.
  static std::mutex* mutex = new std::mutex;
  static auto* allocators = new std::map<int, std::unique_ptr<CudaAllocator>>;
  std::lock_guard<std::mutex> lock(*mutex);
  auto& slot = (*allocators)[device_index];
  if (!slot) slot = std::make_unique<CudaAllocator>(device_index);
  return slot.get();
}
#else
Allocator* cuda_allocator(int) {
  throw Unsupported("device", "this build of cakemoe has no CUDA support (CAKEMOE_WITH_CUDA=OFF)");
}
#endif

}  // namespace cakemoe
