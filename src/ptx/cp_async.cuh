// Non-bulk asynchronous copies (cp.async, sm_80+) and the proxy fence that makes shared memory
// written through the generic proxy visible to wgmma / TMA (the async proxy).
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "ptx/mbarrier.cuh"

namespace cakemoe {
namespace ptx {

/// 16 bytes global -> shared, bypassing L1; `valid` false writes 16 zero bytes and reads nothing.
CAKEMOE_DEVICE void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

/// 4 bytes global -> shared (through L1; `.cg` takes 16 only); `valid` false writes zeros.
CAKEMOE_DEVICE void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}

/// Arrives on `bar` once every cp.async this thread issued before has landed (.noinc: the
/// barrier's expected count must include this arrival).
CAKEMOE_DEVICE void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar))
               : "memory");
}

/// cp_async_16 (always valid) with an L2 policy from ptx/cache_hints.cuh's createpolicy_*.
CAKEMOE_DEVICE void cp_async_16_l2_hint(void* dst, const void* src, uint64_t policy) {
  asm volatile(
      "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
      "l"(src), "l"(policy)
      : "memory");
}

CAKEMOE_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
CAKEMOE_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

/// NOTE: PTX ISA memory consistency model, proxies: generic-proxy writes to shared memory that
/// the async proxy (wgmma operands, bulk copies) reads next need this fence in the writing thread.
CAKEMOE_DEVICE void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace ptx
}  // namespace cakemoe
