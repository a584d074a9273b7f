// Device helpers shared by the BGMV kernels: 16-bit widening / narrowing bitwise equal to the host
// reference, the host launch that sets up PDL (the device side is ptx/sync.cuh's griddep_*), and
// the fixed XOR butterflies of spec §3.2. Instruction wrappers live in src/ptx/.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/launch_pdl.h"
#include "core/macros.h"
#include "formats/codecs.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kWarp = 32;

// ---- 16-bit operands ----------------------------------------------------------------------------

template <bool kFp16>
CAKEMOE_DEVICE float widen(uint16_t bits) {
  // NOTE: both widenings are exact, so the intrinsic equals formats::fp16_to_float.
  if constexpr (kFp16) {
    return __half2float(__ushort_as_half(bits));
  } else {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  }
}

/// RNE narrowing through the host codec (bitwise equal to reference::bgmv::narrow).
template <bool kFp16>
CAKEMOE_DEVICE uint16_t narrow(float value) {
  if constexpr (kFp16) {
    return formats::fp16_from_float(value);
  } else {
    return formats::bf16_from_float(value);
  }
}

/// The 8 elements of a 16-byte vector, element 0 in the low half of .x.
template <bool kFp16>
CAKEMOE_DEVICE void unpack8(const uint4& v, float* out) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = widen<kFp16>(static_cast<uint16_t>(words[i] & 0xFFFFu));
    out[2 * i + 1] = widen<kFp16>(static_cast<uint16_t>(words[i] >> 16));
  }
}

// ---- Programmatic dependent launch (spec §4.4) --------------------------------------------------

// Host side: core/launch_pdl.h (shared with StepFun).
using core::launch_pdl;

// ---- Fixed reduction trees (spec §3.2) ----------------------------------------------------------

/// Warp XOR butterfly with offsets 16, 8, 4, 2, 1: every lane ends with the same sum.
CAKEMOE_DEVICE float warp_butterfly(float v) {
#pragma unroll
  for (int off = kWarp / 2; off >= 1; off /= 2) v = v + __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

/// One reduce-scatter level of warp_reduce_scatter: the lane holds kM slots in v[0, kM) and
/// keeps half of them, swapping the other half with lane ^ kOff.
template <int kM, int kOff, int kSlots>
CAKEMOE_DEVICE void reduce_scatter_level(float (&v)[kSlots], int lane) {
  const bool upper = (lane & kOff) != 0;  // this lane keeps slots [kM / 2, kM) of what it holds
#pragma unroll
  for (int q = 0; q < kM / 2; ++q) {
    const float keep = upper ? v[q + kM / 2] : v[q];
    const float send = upper ? v[q] : v[q + kM / 2];
    v[q] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, kOff);
  }
  if constexpr (kM / 2 > 1) reduce_scatter_level<kM / 2, kOff / 2>(v, lane);
}

/// warp_butterfly of kSlots values at once (kSlots = 2, 4, .. 32), as a reduce-scatter: at
/// offsets 16, 8, .. each lane keeps half of its remaining slots and swaps the other half with
/// lane ^ offset, until one slot is left; the remaining offsets are plain butterflies. Each pair
/// sum is the butterfly's (a + b == b + a), so slot s ends bitwise equal to warp_butterfly(v[s]),
/// held by lanes s * (32 / kSlots) .. + 32 / kSlots - 1. 2 x (kSlots - 1) selects and kSlots - 1
/// shuffles instead of 5 kSlots shuffles. Returns this lane's slot sum; v is clobbered.
template <int kSlots>
CAKEMOE_DEVICE float warp_reduce_scatter(float (&v)[kSlots]) {
  static_assert(kSlots >= 2 && kSlots <= kWarp && (kSlots & (kSlots - 1)) == 0, "power of two");
  reduce_scatter_level<kSlots, kWarp / 2>(v, static_cast<int>(threadIdx.x) & (kWarp - 1));
  float sum = v[0];
#pragma unroll
  for (int off = kWarp / kSlots / 2; off >= 1; off /= 2) {
    sum = sum + __shfl_xor_sync(0xFFFFFFFFu, sum, off);
  }
  return sum;
}

/// Lane 0 of an XOR butterfly over `kLanes` values held by one thread (kLanes a power of two):
/// at offset `off` lane i < off adds lane i + off (== i ^ off), exactly the lanes lane 0 needs.
template <int kLanes>
CAKEMOE_DEVICE float butterfly_lane0(float* v) {
#pragma unroll
  for (int off = kLanes / 2; off >= 1; off /= 2) {
#pragma unroll
    for (int i = 0; i < off; ++i) v[i] = v[i] + v[i + off];
  }
  return v[0];
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
