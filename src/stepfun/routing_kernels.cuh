// StepFun routing kernels (spec stepfun §2) and their launcher, bitwise equal to the CPU
// reference for every T. Ranks are token order (deviation 2) without atomics:
//   single launch (T <= kRoutingSingleMaxTokens): one CTA routes every token (warp per token),
//     ranks each expanded index against the earlier ones in shared memory, scans, scatters;
//   multi-CTA: top-k (warp per token) -> per-chunk counts (warp per chunk of expanded indices,
//     bind-time workspace) -> one-CTA scan -> ordered per-chunk scatter -> table/tail fill.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cakemoe/errors.h"
#include "core/launch_pdl.h"
#include "ptx/sync.cuh"
#include "stepfun/routing_params.h"
#include "stepfun/routing_tables.cuh"
#include "stepfun/routing_topk.cuh"

namespace cakemoe {
namespace stepfun {
namespace routing_kernels {

constexpr int kSingleThreads = 1024;  // 32 warps: one per token of the single-launch path
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;
constexpr int kMaxFillBlocks = 4096;

static_assert(kRoutingSingleMaxTokens * 32 <= kSingleThreads, "one expanded index per thread");

__global__ void __launch_bounds__(kSingleThreads) routing_single_kernel(const RoutingParams p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  __shared__ int local_of[kSingleThreads];
  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize;
  if (p.logits != nullptr) {
    for (int t = tid / kWarpSize; t < p.num_tokens; t += kSingleThreads / kWarpSize) {
      route_token_warp(p, t, lane);
    }
  }
  for (int e = tid; e < p.local_num_experts; e += kSingleThreads) p.histogram[e] = 0;
  __syncthreads();  // topk_packed and the zeroed counts are visible to the block

  const int n = p.num_tokens * p.top_k;  // <= kSingleThreads
  if (tid < n) local_of[tid] = local_expert(p, tid);
  __syncthreads();
  // Rank = earlier indices of the same expert; the last index of each expert stores cnt[e].
  int e = -1, rank = 0;
  if (tid < n) {
    e = local_of[tid];
    if (e >= 0) {
      bool last = true;
      for (int j = 0; j < n; ++j) {
        if (local_of[j] != e) continue;
        if (j < tid) ++rank;
        if (j > tid) last = false;
      }
      if (last) p.histogram[e] = rank + 1;
    }
  }
  __syncthreads();
  const int num_ctas = scan_experts(p);
  __syncthreads();  // ctaOffset visible

  if (tid < n) {
    int slot = -1;
    if (e >= 0) {
      slot = p.histogram[p.local_num_experts + e] * p.tile + rank;
      p.permuted_idx_to_token_idx[slot] = tid / p.top_k;
    }
    p.expanded_idx_to_permuted_idx[tid] = slot;
  }
  for (int c = tid; c < p.max_ctas; c += kSingleThreads) write_cta_entry(p, c, num_ctas);
  const int total_padded = num_ctas * p.tile;
  for (int s = tid; s < p.p2t_end; s += kSingleThreads) fill_p2t_entry(p, s, total_padded);
}

__global__ void __launch_bounds__(kThreads) routing_topk_kernel(const RoutingParams p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  const int t = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (t < p.num_tokens) route_token_warp(p, t, threadIdx.x % kWarpSize);  // whole warps
}

/// Chunk of the calling warp: [begin, end) of the expanded indices; false past the last chunk.
struct Chunk {
  int index;
  int64_t begin, end;
};

CAKEMOE_DEVICE bool warp_chunk(const RoutingParams& p, Chunk* chunk) {
  chunk->index = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (chunk->index >= p.num_chunks) return false;
  const int64_t n = static_cast<int64_t>(p.num_tokens) * p.top_k;
  chunk->begin = static_cast<int64_t>(chunk->index) * p.chunk_size;
  chunk->end = min(n, chunk->begin + p.chunk_size);
  return true;
}

/// counts[chunk][e] = pairs of local expert e in the chunk. The row is private to the warp, so
/// group leaders add without atomics; integer counts do not depend on any order.
__global__ void __launch_bounds__(kThreads) routing_count_kernel(const RoutingParams p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  Chunk chunk;
  if (!warp_chunk(p, &chunk)) return;
  const int lane = threadIdx.x % kWarpSize;
  int32_t* counts = p.chunk_counts + static_cast<int64_t>(chunk.index) * p.local_num_experts;
  for (int e = lane; e < p.local_num_experts; e += kWarpSize) counts[e] = 0;
  __syncwarp();
  for (int64_t i0 = chunk.begin; i0 < chunk.end; i0 += kWarpSize) {
    const int64_t i = i0 + lane;
    const int e = i < chunk.end ? local_expert(p, i) : -1;
    const unsigned group = __match_any_sync(kFullMask, e);
    if (e >= 0 && lane == __ffs(group) - 1) counts[e] += __popc(group);
    __syncwarp();
  }
}

/// cnt[e] = Σ over chunks, and each chunk's count becomes the chunk's exclusive rank base within
/// expert e (chunks in index order = token order). Then the expert scan (one CTA).
__global__ void __launch_bounds__(kSingleThreads) routing_scan_kernel(const RoutingParams p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  const int num_local = p.local_num_experts;
  constexpr int kBatch = 16;  // loads in flight per thread (the chain of sums is serial)
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) {
    int run = 0;
    int32_t* counts = p.chunk_counts + e;
    for (int c0 = 0; c0 < p.num_chunks; c0 += kBatch) {
      int v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        v[u] = c0 + u < p.num_chunks ? counts[static_cast<int64_t>(c0 + u) * num_local] : 0;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (c0 + u < p.num_chunks) counts[static_cast<int64_t>(c0 + u) * num_local] = run;
        run += v[u];
      }
    }
    p.histogram[e] = run;
  }
  __syncthreads();
  scan_experts(p);
}

/// Slots in token order: within a chunk, 32 indices at a time in index order; equal experts in
/// one step are ranked by lane. slot = ctaOffset[e]*tile + chunk base + rank.
__global__ void __launch_bounds__(kThreads) routing_scatter_kernel(const RoutingParams p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  Chunk chunk;
  if (!warp_chunk(p, &chunk)) return;
  const int lane = threadIdx.x % kWarpSize;
  int32_t* base = p.chunk_counts + static_cast<int64_t>(chunk.index) * p.local_num_experts;
  const int32_t* cta_offset = p.histogram + p.local_num_experts;
  for (int64_t i0 = chunk.begin; i0 < chunk.end; i0 += kWarpSize) {
    const int64_t i = i0 + lane;
    const int e = i < chunk.end ? local_expert(p, i) : -1;
    const unsigned group = __match_any_sync(kFullMask, e);
    if (i < chunk.end) {
      int slot = -1;
      if (e >= 0) {
        slot = cta_offset[e] * p.tile + base[e] + __popc(group & lanes_below(lane));
        p.permuted_idx_to_token_idx[slot] = static_cast<int32_t>(i / p.top_k);
      }
      p.expanded_idx_to_permuted_idx[i] = slot;
    }
    __syncwarp();  // every lane has read base[e] before the leader moves it
    if (e >= 0 && lane == __ffs(group) - 1) base[e] += __popc(group);
    __syncwarp();
  }
}

/// CTA tables (with their tail) and the non-routed p2t entries, grid-stride.
__global__ void __launch_bounds__(kThreads) routing_fill_kernel(const RoutingParams p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  const int num_ctas = *p.num_non_exiting_ctas;
  const int total_padded = num_ctas * p.tile;
  const int n = max(p.max_ctas, p.p2t_end);
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
    if (idx < p.max_ctas) write_cta_entry(p, idx, num_ctas);
    if (idx < p.p2t_end) fill_p2t_entry(p, idx, total_padded);
  }
}

inline int ceil_div_int(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

/// Enqueues the routing of `p` on `stream` (no allocation, no host sync).
inline void launch(const RoutingParams& p, Stream stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.num_chunks == 0) {
    if (p.num_tokens > kRoutingSingleMaxTokens) {
      throw InvalidArgument("num_chunks", "the single-launch routing path needs T <= " +
                                              std::to_string(kRoutingSingleMaxTokens));
    }
    core::launch_dependent(routing_single_kernel, 1, dim3(kSingleThreads), 0, s, p);
    return;
  }
  if (p.logits != nullptr) {
    core::launch_dependent(routing_topk_kernel, ceil_div_int(p.num_tokens, kWarpsPerBlock),
                           dim3(kThreads), 0, s, p);
  }
  const int chunk_blocks = ceil_div_int(p.num_chunks, kWarpsPerBlock);
  core::launch_dependent(routing_count_kernel, chunk_blocks, dim3(kThreads), 0, s, p);
  core::launch_dependent(routing_scan_kernel, 1, dim3(kSingleThreads), 0, s, p);
  core::launch_dependent(routing_scatter_kernel, chunk_blocks, dim3(kThreads), 0, s, p);
  const int64_t fill = p.max_ctas > p.p2t_end ? p.max_ctas : p.p2t_end;
  const int fill_blocks = max(1, min(kMaxFillBlocks, ceil_div_int(fill, kThreads)));
  core::launch_dependent(routing_fill_kernel, fill_blocks, dim3(kThreads), 0, s, p);
}

}  // namespace routing_kernels
}  // namespace stepfun
}  // namespace cakemoe
