// Launchers of the EP bookkeeping kernels: enqueue only (no allocation, no host sync).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "stepfun/ep/ep_kernels.cuh"

namespace cakemoe {
namespace stepfun {
namespace ep {

int32_t widest_word(const void* a, const void* b, int64_t row_bytes) {
  const auto fits = [&](int64_t w) {
    return row_bytes % w == 0 && reinterpret_cast<uintptr_t>(a) % w == 0 &&
           reinterpret_cast<uintptr_t>(b) % w == 0;
  };
  return fits(16) ? 16 : fits(4) ? 4 : 1;
}

namespace {
cudaStream_t as_cuda(Stream stream) { return static_cast<cudaStream_t>(stream); }
unsigned flat_blocks(int64_t n) {
  return static_cast<unsigned>((n + kernels::kFlatThreads - 1) / kernels::kFlatThreads);
}
}  // namespace

void launch_route(const RouteParams& p, Stream stream) {
  kernels::route_kernel<<<p.world_size, kernels::kRouteThreads, 0, as_cuda(stream)>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

void launch_pack(const PackParams& p, Stream stream) {
  const dim3 grid(static_cast<unsigned>(p.rows_per_peer), static_cast<unsigned>(p.regions));
  kernels::pack_kernel<<<grid, kernels::kPackThreads, 0, as_cuda(stream)>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

void launch_mask(const MaskParams& p, Stream stream) {
  const int64_t total = static_cast<int64_t>(p.world_size) * p.rows_per_peer * p.top_k;
  kernels::mask_kernel<<<flat_blocks(total), kernels::kFlatThreads, 0, as_cuda(stream)>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

void launch_unpack_ids(const UnpackIdsParams& p, Stream stream) {
  kernels::unpack_ids_kernel<<<flat_blocks(p.count), kernels::kFlatThreads, 0, as_cuda(stream)>>>(
      p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

void launch_combine(const CombineParams& p, Stream stream) {
  kernels::combine_kernel<<<static_cast<unsigned>(p.num_tokens), kernels::kCombineThreads, 0,
                            as_cuda(stream)>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
