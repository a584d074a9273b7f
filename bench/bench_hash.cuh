// Device-side pseudo-random fill of the CUDA benchmarks: a cheap integer hash of (index, seed), so
// large operands are generated in place with no host traffic.
#pragma once

#include <cstdint>

namespace cakemoe {
namespace bench {

/// 32 well-mixed bits of element `i` under `seed`.
__device__ inline uint32_t hash_index(int64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

}  // namespace bench
}  // namespace cakemoe
