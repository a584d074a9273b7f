// Bulk tensor copies (TMA, PTX ISA "cp.async.bulk.tensor") global -> shared, completing on an
// mbarrier, and the L2 policies passed with them. The tensor map lives in a __grid_constant__
// kernel parameter; its generic address is what the instruction takes.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "ptx/mbarrier.cuh"

namespace cakemoe {
namespace ptx {

CAKEMOE_DEVICE void prefetch_tensor_map(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tensor_map) : "memory");
}

CAKEMOE_DEVICE uint64_t l2_policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

CAKEMOE_DEVICE uint64_t l2_policy_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

/// Box at coordinates (c0 innermost, c1) of a 2-D tensor map into `dst`.
CAKEMOE_DEVICE void tma_load_2d(void* dst, const void* tensor_map, uint64_t* bar, int32_t c0,
                                int32_t c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(smem_addr(dst)),
      "l"(tensor_map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

/// Box at coordinates (c0 innermost, c1, c2) of a 3-D tensor map into `dst`.
CAKEMOE_DEVICE void tma_load_3d(void* dst, const void* tensor_map, uint64_t* bar, int32_t c0,
                                int32_t c1, int32_t c2, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(smem_addr(dst)),
      "l"(tensor_map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "l"(policy)
      : "memory");
}

/// `bytes` (multiple of 16, 16-byte aligned both sides) global -> shared, completing on `bar`.
CAKEMOE_DEVICE void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                              uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;\n" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

}  // namespace ptx
}  // namespace cakemoe
