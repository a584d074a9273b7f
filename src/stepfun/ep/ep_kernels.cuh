// Device bodies of the EP bookkeeping kernels (params: ep_kernels.h; host mirrors:
// dispatch_plan.cpp, which they must match bit for bit).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"
#include "formats/codecs.h"
#include "stepfun/ep/ep_kernels.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace kernels {

constexpr int kWarpSize = 32;
constexpr int kRouteThreads = 512;
constexpr int kPackThreads = 128;
constexpr int kFlatThreads = 256;
constexpr int kCombineThreads = 256;
constexpr int kCombineVector = 8;  ///< bf16 per 16-byte access

/// Route: one CTA per destination d walks the tokens in order, so the rows of d's region are
/// taken in token order (a block-wide exclusive scan of the "goes to d" flags per chunk).
__global__ void __launch_bounds__(kRouteThreads) route_kernel(RouteParams p) {
  __shared__ int32_t warp_totals[kRouteThreads / kWarpSize];
  __shared__ int32_t taken;  // rows of d's region used by earlier chunks
  const int d = blockIdx.x;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (threadIdx.x == 0) taken = 0;
  __syncthreads();
  for (int base = 0; base < p.num_tokens; base += kRouteThreads) {
    // Flag: does any of token t's experts live on d?
    const int t = base + static_cast<int>(threadIdx.x);
    bool to_d = false;
    if (t < p.num_tokens) {
      for (int k = 0; k < p.top_k; ++k) {
        const int32_t id = p.topk_ids[static_cast<int64_t>(t) * p.top_k + k];
        if (id >= 0 && id < p.num_experts && p.owner_of_expert[id] == d) to_d = true;
      }
    }
    // Exclusive scan: warp ballot, then the totals of the warps before this one.
    const unsigned ballot = __ballot_sync(0xffffffffu, to_d);
    if (lane == 0) warp_totals[warp] = __popc(ballot);
    __syncthreads();
    int row = taken + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) row += warp_totals[w];
    if (t < p.num_tokens) {
      p.slot_of[static_cast<int64_t>(t) * p.world_size + d] = to_d ? row : -1;
      if (to_d) p.token_of_send_row[static_cast<int64_t>(d) * p.rows_per_peer + row] = t;
    }
    __syncthreads();  // everyone has read `taken` and the totals
    if (threadIdx.x == 0) {
      int chunk = 0;
      for (int w = 0; w < kRouteThreads / kWarpSize; ++w) chunk += warp_totals[w];
      taken += chunk;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) p.send_counts[d] = taken;
}

template <typename Word>
CAKEMOE_DEVICE void copy_row(const uint8_t* src, uint8_t* dst, int64_t bytes) {
  const Word* s = reinterpret_cast<const Word*>(src);
  Word* o = reinterpret_cast<Word*>(dst);
  const int64_t words = bytes / static_cast<int64_t>(sizeof(Word));
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) o[i] = s[i];
}

/// Pack: one CTA per (row j, region d); rows past the region's count are left alone.
__global__ void __launch_bounds__(kPackThreads) pack_kernel(PackParams p) {
  const int d = blockIdx.y;
  const int j = blockIdx.x;
  if (j >= p.send_counts[d]) return;
  const int64_t row = static_cast<int64_t>(d) * p.rows_per_peer + j;
  const int64_t t = p.token_of_send_row[row];
  for (int f = 0; f < p.num_fields; ++f) {
    const PackField& field = p.fields[f];
    const uint8_t* src = field.src + t * field.row_bytes;
    uint8_t* dst = field.dst + row * field.row_bytes;
    if (field.word_bytes == 16) {
      copy_row<uint4>(src, dst, field.row_bytes);
    } else if (field.word_bytes == 4) {
      copy_row<uint32_t>(src, dst, field.row_bytes);
    } else {
      copy_row<uint8_t>(src, dst, field.row_bytes);
    }
  }
}

/// Mask: ids of the rows a source did not fill this launch become -1 (routed nowhere).
__global__ void __launch_bounds__(kFlatThreads) mask_kernel(MaskParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kFlatThreads + threadIdx.x;
  const int64_t total = static_cast<int64_t>(p.world_size) * p.rows_per_peer * p.top_k;
  if (i >= total) return;
  const int64_t row = i / p.top_k;
  const int s = static_cast<int>(row / p.rows_per_peer);
  if (row % p.rows_per_peer >= p.recv_counts[s]) p.recv_ids[i] = -1;
}

__global__ void __launch_bounds__(kFlatThreads) unpack_ids_kernel(UnpackIdsParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kFlatThreads + threadIdx.x;
  if (i < p.count) {
    p.topk_ids[i] = static_cast<int32_t>(static_cast<uint32_t>(p.topk_packed[i]) >> 16);
  }
}

/// Combine: one CTA per token; each element sums its partials over the peers in ascending order
/// in fp32 from +0 and rounds to bf16 once (combine_host).
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(CombineParams p) {
  const int64_t t = blockIdx.x;
  const int32_t* slots = p.slot_of + t * p.world_size;
  uint16_t* out = p.output + t * p.hidden;
  if (p.vector_access) {
    for (int64_t c = threadIdx.x; c < p.hidden / kCombineVector; c += kCombineThreads) {
      float acc[kCombineVector];
      for (int v = 0; v < kCombineVector; ++v) acc[v] = 0.f;
      for (int d = 0; d < p.world_size; ++d) {
        const int32_t slot = slots[d];
        if (slot < 0) continue;
        const int64_t row = static_cast<int64_t>(d) * p.rows_per_peer + slot;
        const uint4 word = reinterpret_cast<const uint4*>(p.partials + row * p.hidden)[c];
        const uint16_t* bits = reinterpret_cast<const uint16_t*>(&word);
        for (int v = 0; v < kCombineVector; ++v) acc[v] += formats::bf16_to_float(bits[v]);
      }
      uint4 packed;
      uint16_t* res = reinterpret_cast<uint16_t*>(&packed);
      for (int v = 0; v < kCombineVector; ++v) res[v] = formats::bf16_from_float(acc[v]);
      reinterpret_cast<uint4*>(out)[c] = packed;
    }
    return;
  }
  for (int64_t h = threadIdx.x; h < p.hidden; h += kCombineThreads) {
    float acc = 0.f;
    for (int d = 0; d < p.world_size; ++d) {
      const int32_t slot = slots[d];
      if (slot < 0) continue;
      const int64_t row = static_cast<int64_t>(d) * p.rows_per_peer + slot;
      acc += formats::bf16_to_float(p.partials[row * p.hidden + h]);
    }
    out[h] = formats::bf16_from_float(acc);
  }
}

}  // namespace kernels
}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
