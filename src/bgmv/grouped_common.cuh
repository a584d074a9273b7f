// Device helpers of the grouped pipeline and the order-remap prologue (spec bgmv §5, §6):
// route validity / bin, 16-bit widening, a block-wide exclusive scan and a stable in-block
// placement (pairs of one key keep ascending pair order).
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "formats/codecs.h"

namespace cakemoe {
namespace bgmv {
namespace grouped {

/// (lora, expert) bin of pair p, or -1 for a pair that contributes nothing (padding token,
/// LoRA -1) or whose indices are out of range (kept memory-safe; prepare validated them).
CAKEMOE_DEVICE int route_bin(const int64_t* tokens, const int64_t* experts, const int64_t* loras,
                             int p, int num_tokens, int num_loras, int num_experts) {
  const int64_t t = tokens[p];
  if (t < 0 || t >= num_tokens) return -1;
  const int64_t l = loras[t];
  const int64_t e = experts[p];
  if (l < 0 || l >= num_loras || e < 0 || e >= num_experts) return -1;
  return static_cast<int>(l * num_experts + e);
}

template <bool kBf16>
CAKEMOE_DEVICE float widen(uint16_t bits) {
  return kBf16 ? formats::bf16_to_float(bits) : formats::fp16_to_float(bits);
}

template <bool kBf16>
CAKEMOE_DEVICE uint16_t narrow(float v) {
  return kBf16 ? formats::bf16_from_float(v) : formats::fp16_from_float(v);
}

/// 8 consecutive 16-bit values (one 16-byte load) widened to fp32.
template <bool kBf16>
CAKEMOE_DEVICE void load8(const uint16_t* src, float* out) {
  const uint4 v = *reinterpret_cast<const uint4*>(src);
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = widen<kBf16>(static_cast<uint16_t>(w[i] & 0xFFFFu));
    out[2 * i + 1] = widen<kBf16>(static_cast<uint16_t>(w[i] >> 16));
  }
}

/// In-place exclusive scan of data[0, n) (shared or global memory) by the whole block, of the
/// values load(i, data[i]) (a pure function, called twice per element by the thread that scans
/// it, so the transform needs no pass or barrier of its own); `warp_sums` holds 32 ints of shared
/// memory. Returns the total. Every thread must call it.
template <typename Load>
CAKEMOE_DEVICE int block_exclusive_scan(int* data, int n, int* warp_sums, Load load) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = (n + blockDim.x - 1) / blockDim.x;
  const int begin = min(n, tid * per), end = min(n, begin + per);
  int local = 0;
  for (int i = begin; i < end; ++i) local += load(i, data[i]);
  int incl = local;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int v = __shfl_up_sync(0xFFFFFFFFu, incl, off);
    if (lane >= off) incl += v;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int nw = (blockDim.x + 31) / 32;
    int w = lane < nw ? warp_sums[lane] : 0;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, w, off);
      if (lane >= off) w += v;
    }
    warp_sums[lane] = w;  // inclusive warp prefix
  }
  __syncthreads();
  int run = incl - local + (warp > 0 ? warp_sums[warp - 1] : 0);
  const int total = warp_sums[31];
  for (int i = begin; i < end; ++i) {
    const int v = load(i, data[i]);
    data[i] = run;
    run += v;
  }
  __syncthreads();
  return total;
}

CAKEMOE_DEVICE int block_exclusive_scan(int* data, int n, int* warp_sums) {
  return block_exclusive_scan(data, n, warp_sums, [](int, int v) { return v; });
}

/// Stable placement of one round of blockDim.x items (thread order = ascending item order):
/// each thread with key >= 0 gets cursor[key] + (number of earlier items of the same key), and
/// cursor[key] advances past the round. `cursor` is shared memory. Every thread must call it.
CAKEMOE_DEVICE int stable_place(int key, int* cursor) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned peers = __match_any_sync(0xFFFFFFFFu, key);
  const unsigned below = peers & ((1u << lane) - 1u);
  const bool leader = (peers >> lane) == 1u;  // highest lane of its peer group
  int pos = -1;
  const int warps = (blockDim.x + 31) / 32;
  for (int w = 0; w < warps; ++w) {
    if (warp == w) {
      const int base = key >= 0 ? cursor[key] : 0;
      __syncwarp();
      if (key >= 0) {
        pos = base + __popc(below);
        if (leader) cursor[key] = base + __popc(peers);
      }
    }
    __syncthreads();
  }
  return pos;
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
