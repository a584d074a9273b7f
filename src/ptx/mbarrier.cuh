// mbarrier wrappers (PTX ISA "Parallel Synchronization and Communication: mbarrier"), CTA scope.
// A pipeline stage has a `full` barrier (producers arrive, TMA completes bytes on it) and an
// `empty` barrier (consumers arrive when they are done reading the stage).
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace cakemoe {
namespace ptx {

/// The shared-state-space address of a generic pointer into shared memory.
CAKEMOE_DEVICE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

CAKEMOE_DEVICE void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals)
               : "memory");
}

/// Makes initialized barriers visible to the async proxy (TMA) and the other threads; follow it
/// with a CTA barrier.
CAKEMOE_DEVICE void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

CAKEMOE_DEVICE void mbarrier_arrive(uint64_t* bar) {
  asm volatile(
      "{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_addr(bar))
      : "memory");
}

/// Arrives and announces `bytes` that bulk copies will complete on this barrier's phase.
CAKEMOE_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

CAKEMOE_DEVICE bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

/// Waits until the phase of parity `parity` has completed. NOTE: a fresh barrier counts its
/// phase of parity 1 as complete, so producers start waiting on `empty` with parity 1.
CAKEMOE_DEVICE void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

}  // namespace ptx
}  // namespace cakemoe
