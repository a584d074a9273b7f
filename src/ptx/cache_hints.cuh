// L2 cache controls (sm_80+): eviction-priority policies from createpolicy, the loads and stores
// that carry one (.L2::cache_hint), discard and prefetch. PTX ISA "Data Movement and Conversion
// Instructions": createpolicy, ld, st, discard, prefetch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"

namespace cakemoe {
namespace ptx {

/// Policy for bytes read once (streamed weights): they do not push out what is read again.
CAKEMOE_DEVICE uint64_t createpolicy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

/// Policy for bytes read again soon (e.g. by the next kernel of a pipeline).
CAKEMOE_DEVICE uint64_t createpolicy_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

/// The policy a plain access gets (a hinted access with it behaves as an unhinted one).
CAKEMOE_DEVICE uint64_t createpolicy_evict_normal() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

/// 16-byte load of 4 floats with an L2 policy.
CAKEMOE_DEVICE float4 ld_global_l2_hint_v4_f32(const float4* gmem, uint64_t policy) {
  float4 v;
  asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(gmem), "l"(policy)
               : "memory");
  return v;
}

/// 8-byte read-only (non-coherent path) load with an L2 policy; `gmem` 8-byte aligned.
CAKEMOE_DEVICE uint2 ld_global_nc_l2_hint_v2_u32(const void* gmem, uint64_t policy) {
  uint2 v;
  asm volatile("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\n"
               : "=r"(v.x), "=r"(v.y)
               : "l"(gmem), "l"(policy));
  return v;
}

/// 16-byte read-only (non-coherent path) load with an L2 policy; `gmem` 16-byte aligned.
CAKEMOE_DEVICE uint4 ld_global_nc_l2_hint_v4_u32(const void* gmem, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(gmem), "l"(policy));
  return v;
}

/// One float stored with an L2 policy.
CAKEMOE_DEVICE void st_global_l2_hint_f32(float* gmem, float value, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(gmem), "f"(value), "l"(policy)
               : "memory");
}

/// Two floats (8 bytes, `gmem` 8-byte aligned) stored with an L2 policy.
CAKEMOE_DEVICE void st_global_l2_hint_v2_f32(float* gmem, float a, float b, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;\n" ::"l"(gmem), "f"(a), "f"(b),
               "l"(policy)
               : "memory");
}

/// Drops the 128-byte L2 line at `gmem` (128-byte aligned) without writing it back: its bytes
/// become indeterminate. For scratch that no one reads again before rewriting it.
CAKEMOE_DEVICE void discard_global_l2_128(const void* gmem) {
  asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(gmem) : "memory");
}

/// Pulls the line holding `gmem` into L2 (a hint: no result, no fault on its own).
CAKEMOE_DEVICE void prefetch_global_l2(const void* gmem) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
}

}  // namespace ptx
}  // namespace cakemoe
