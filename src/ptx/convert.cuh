// Packed conversions and arithmetic for register dequantization (sm_89+ cvt, f16x2 math), on raw
// 32-bit registers so callers need no half-precision types.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "ptx/mbarrier.cuh"

namespace cakemoe {
namespace ptx {

/// Two e4m3 bytes (low byte -> low half) to f16x2; exact (every e4m3 value is an f16).
CAKEMOE_DEVICE uint32_t cvt_e4m3x2_f16x2(uint16_t bytes) {
  uint32_t out;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(out) : "h"(bytes));
  return out;
}

/// An f16 (raw bits) as fp32; exact.
CAKEMOE_DEVICE float f16_to_f32(uint32_t bits) {
  float out;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(out) : "h"(static_cast<uint16_t>(bits)));
  return out;
}

/// Two fp32 values rounded to nearest even into bf16x2 (`lo` in the low half).
CAKEMOE_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t out;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(out) : "f"(hi), "f"(lo));
  return out;
}

/// Lane-wise f16 product, round to nearest even; subnormals kept (no .ftz).
CAKEMOE_DEVICE uint32_t mul_f16x2(uint32_t a, uint32_t b) {
  uint32_t out;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(out) : "r"(a), "r"(b));
  return out;
}

/// Shared-memory accesses by 32-bit shared address (ptx::smem_addr): a pointer carved from the
/// dynamic shared memory through integer alignment arithmetic is generic to the compiler, whose
/// loads then go through the generic path (LD.E, 64-bit addresses) instead of LDS.
CAKEMOE_DEVICE uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

CAKEMOE_DEVICE uint2 ld_shared_v2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}

CAKEMOE_DEVICE uint32_t ld_shared_u16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}

CAKEMOE_DEVICE uint32_t ld_shared_u8(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u8 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v & 0xFFu;
}

CAKEMOE_DEVICE uint32_t ld_shared_b32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

CAKEMOE_DEVICE void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

}  // namespace ptx
}  // namespace cakemoe
