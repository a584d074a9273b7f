// wgmma bookkeeping (sm_90a): the shared-memory matrix descriptor, fence / commit / wait, and the
// operand fence that keeps the compiler from moving accumulator reads across them. The MMA
// wrappers themselves are generated into ptx/wgmma_ops.cuh.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "ptx/mbarrier.cuh"
#include "ptx/wgmma_ops.cuh"

namespace cakemoe {
namespace ptx {

/// Descriptor of a K-major operand in the 128-byte swizzle (TMA SWIZZLE_128B): rows of 128 bytes,
/// groups of 8 rows 1024 bytes apart, 1024-byte aligned start. PTX ISA "Matrix Descriptor
/// Format": start >> 4 in bits 0-13, leading byte offset (unused for swizzled K-major, 1) in
/// 16-29, stride byte offset >> 4 in 32-45, swizzle mode (1 = 128B) in 62-63.
CAKEMOE_DEVICE uint64_t sw128_kmajor_desc(const void* smem) {
  const uint64_t start = (smem_addr(smem) & 0x3FFFFu) >> 4;
  return start | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

/// The descriptor advanced by `bytes` along K inside the 128-byte row (bytes % 16 == 0, < 128).
CAKEMOE_DEVICE uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

CAKEMOE_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

CAKEMOE_DEVICE void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/// Waits until at most `kPending` committed wgmma groups of this warpgroup are in flight.
template <int kPending>
CAKEMOE_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/// Pins accumulator registers at this point of the program (reads and writes cannot cross it).
template <int kN>
CAKEMOE_DEVICE void fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// The same for register A fragments: an async wgmma reads them after it issues, so they stay
/// live and unmoved until its wait.
template <int kN>
CAKEMOE_DEVICE void fence_operands(uint32_t (&a)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

}  // namespace ptx
}  // namespace cakemoe
