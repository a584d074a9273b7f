// bench_bgmv --stages: skeletons of a redundant-shrink cluster decode (bench/NOTES.md session 19),
// sized for H 3072, rank 32, T 1, top-2 (A and B 393 KB each, x 6 KB). Every cluster would
// compute the whole shrink, its CTA q from A's slice q (393 KB / cluster size; the same bytes in
// every cluster, so only the first cluster's reads reach HBM), each CTA also loads x and its own
// 3 KB of B (128 CTAs cover B once), then the cluster exchanges its partials through distributed
// shared memory and writes. Nothing is computed: the rows time the first trip's bytes per SM and
// the handoff, with thread-issued 16-byte loads or with TMA bulk copies (cp.async.bulk into
// shared memory, one mbarrier). H200, session 19: 6.2-7.1 µs, no faster than the real two-kernel
// T 1 plan (6.4), the bulk copies slower than the loads; the design was closed on this.
// Included at the end of bench_bgmv_stages.cuh only.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

namespace cakemoe {
namespace {

constexpr int kSkelCtas = 128, kSkelThreads = 128;
constexpr int kSkelABytes = 32 * 3072 * 2 * 2;                    // A rows of 2 routes x rank 32
constexpr int kSkelBBytesPerCta = 32 * 3072 * 2 * 2 / kSkelCtas;  // 3 KB
constexpr int kSkelXBytes = 3072 * 2;

struct SkeletonBuffers {
  const uint4* a;  ///< [kSkelABytes]
  const uint4* b;  ///< [kSkelCtas][kSkelBBytesPerCta]
  const uint4* x;  ///< [kSkelXBytes]
  float* out;      ///< [kSkelCtas][kSkelThreads]
};

__device__ __forceinline__ float sum4(const uint4& v) {
  return __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
}

/// The sum of src's kBytes as 16-byte vectors, thread-strided (global or shared memory), every
/// load issued before the first add (unrolled, as a real first trip would be).
template <int kBytes>
__device__ __forceinline__ float strided_sum(const uint4* src) {
  constexpr int kVectors = (kBytes / 16 + kSkelThreads - 1) / kSkelThreads;
  uint4 v[kVectors];
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int i = j * kSkelThreads + static_cast<int>(threadIdx.x);
    v[j] = i < kBytes / 16 ? src[i] : make_uint4(0, 0, 0, 0);
  }
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) acc += sum4(v[j]);
  return acc;
}

/// Issues cp.async.bulk copies of `bytes` (multiple of 16) from `src` into `dst` in 4 KB pieces,
/// one piece per thread, completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, uint64_t* bar) {
  constexpr int kPiece = 4096;
  const int pieces = (bytes + kPiece - 1) / kPiece;
  for (int i = threadIdx.x; i < pieces; i += kSkelThreads) {
    const int n = min(kPiece, bytes - i * kPiece);
    const unsigned d =
        static_cast<unsigned>(__cvta_generic_to_shared(static_cast<char*>(dst) + i * kPiece));
    const unsigned m = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
        "[%3];\n" ::"r"(d),
        "l"(static_cast<const char*>(src) + i * kPiece), "r"(n), "r"(m)
        : "memory");
  }
}

/// One CTA of the skeleton: A's slice of its cluster rank, x, its B slice; partials exchanged
/// over the cluster of kCluster CTAs; kTma: bulk copies into dynamic shared memory instead of
/// thread loads.
template <bool kTma, int kCluster>
__global__ void redundant_cluster_kernel(SkeletonBuffers h) {
  namespace cg = cooperative_groups;
  constexpr int kABytes = kSkelABytes / kCluster;
  constexpr int kStaged = kABytes + kSkelXBytes + kSkelBBytesPerCta;
  extern __shared__ uint4 staged[];  // kTma: A slice, x, B slice
  __shared__ float partial[kSkelThreads];
  __shared__ uint64_t bar;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int cta = blockIdx.x;
  const uint4* a = h.a + static_cast<int64_t>(rank) * kABytes / 16;
  const uint4* b = h.b + static_cast<int64_t>(cta) * kSkelBBytesPerCta / 16;
  float acc = 0.0f;
  if constexpr (kTma) {
    const unsigned m = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(m) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(m), "r"(kStaged)
                   : "memory");
    }
    __syncthreads();
    char* base = reinterpret_cast<char*>(staged);
    bulk_copy(base, a, kABytes, &bar);
    bulk_copy(base + kABytes, h.x, kSkelXBytes, &bar);
    bulk_copy(base + kABytes + kSkelXBytes, b, kSkelBBytesPerCta, &bar);
    unsigned done = 0;
    while (!done) {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
          " selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(m)
          : "memory");
    }
    acc = strided_sum<kStaged>(staged);
  } else {
    acc =
        strided_sum<kABytes>(a) + strided_sum<kSkelXBytes>(h.x) + strided_sum<kSkelBBytesPerCta>(b);
  }
  partial[threadIdx.x] = acc;
  cluster.sync();
  float total = 0.0f;
#pragma unroll
  for (int r = 0; r < kCluster; ++r) total += *cluster.map_shared_rank(&partial[threadIdx.x], r);
  cluster.sync();  // no CTA leaves while a peer may still read its shared memory
  h.out[cta * kSkelThreads + threadIdx.x] = total;
}

/// Launches the skeleton in clusters of kCluster CTAs (16 needs the non-portable opt-in).
template <bool kTma, int kCluster>
void launch_redundant_cluster(const SkeletonBuffers& h, cudaStream_t stream) {
  const auto kernel = redundant_cluster_kernel<kTma, kCluster>;
  const size_t smem =
      kTma ? static_cast<size_t>(kSkelABytes / kCluster + kSkelXBytes + kSkelBBytesPerCta) : 0;
  CAKEMOE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CAKEMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kSkelCtas);
  config.blockDim = dim3(kSkelThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kCluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  CAKEMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, h));
}

void run_redundant_cluster_graphs(Bench& bench) {
  const size_t b_bytes = size_t{kSkelCtas} * kSkelBBytesPerCta;
  const size_t out_bytes = size_t{kSkelCtas} * kSkelThreads * sizeof(float);
  const size_t total = kSkelABytes + b_bytes + kSkelXBytes + out_bytes;
  char* base = nullptr;
  CAKEMOE_CUDA_CHECK(cudaMalloc(&base, total));
  CAKEMOE_CUDA_CHECK(cudaMemset(base, 0x3c, total));
  SkeletonBuffers h{};
  h.a = reinterpret_cast<const uint4*>(base);
  h.b = reinterpret_cast<const uint4*>(base + kSkelABytes);
  h.x = reinterpret_cast<const uint4*>(base + kSkelABytes + b_bytes);
  h.out = reinterpret_cast<float*>(base + kSkelABytes + b_bytes + kSkelXBytes);
  for (const int cluster : {8, 16}) {
    for (const bool tma : {false, true}) {
      const std::string name = "redundant x" + std::to_string(kSkelCtas / cluster) + " cl" +
                               std::to_string(cluster) + (tma ? " tma" : " ld");
      try {
        const GraphExec g(bench.stream, [&](cudaStream_t st) {
          if (cluster == 8) {
            tma ? launch_redundant_cluster<true, 8>(h, st)
                : launch_redundant_cluster<false, 8>(h, st);
          } else {
            tma ? launch_redundant_cluster<true, 16>(h, st)
                : launch_redundant_cluster<false, 16>(h, st);
          }
        });
        print_stage({name, bench.time_graph(g.get())});
      } catch (const std::exception& e) {
        std::printf("  %-20s not measured: %s\n", name.c_str(), e.what());
      }
    }
  }
  CAKEMOE_CUDA_CHECK(cudaFree(base));
}

}  // namespace
}  // namespace cakemoe
