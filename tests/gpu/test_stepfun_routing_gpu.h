// Shared by the GPU tests of the bitwise StepFun stages (routing, requant, finalize): byte-exact
// comparison of a device buffer with its CPU-reference twin, naming the first mismatch.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "cakemoe/tensor.h"
#include "gpu_testbed.h"

namespace cakemoe {
namespace gpu_testbed {

/// Prints element `i` of an element-size-`size` buffer as decimal and hex.
inline std::string element_text(const uint8_t* base, int64_t i, size_t size) {
  uint32_t v = 0;
  std::memcpy(&v, base + i * size, size);
  char buf[64];
  if (size == 4) {
    std::snprintf(buf, sizeof(buf), "%d (0x%08x)", static_cast<int32_t>(v), v);
  } else {
    std::snprintf(buf, sizeof(buf), "%u (0x%0*x)", v, static_cast<int>(2 * size), v);
  }
  return buf;
}

/// True when `device` (a CUDA tensor) holds exactly the bytes of `expected` (a CPU tensor);
/// otherwise records a failure naming `what`, the first differing element, both values and the
/// number of differing elements.
inline bool expect_same_bytes(const std::string& what, const TensorView& expected,
                              const TensorView& device) {
  const Tensor actual = to_host(device);
  if (actual.nbytes() != expected.nbytes()) {
    ADD_FAILURE() << what << ": size " << actual.nbytes() << " != " << expected.nbytes();
    return false;
  }
  const size_t size = dtype_size(expected.dtype);
  const auto* a = static_cast<const uint8_t*>(actual.data());
  const auto* e = static_cast<const uint8_t*>(expected.data);
  if (std::memcmp(a, e, expected.nbytes()) == 0) return true;
  const int64_t n = static_cast<int64_t>(expected.nbytes() / size);
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i * size, e + i * size, size) != 0) {
      if (first < 0) first = i;
      ++count;
    }
  }
  ADD_FAILURE() << what << ": " << count << " of " << n << " elements differ; first at " << first
                << ": expected " << element_text(e, first, size) << ", got "
                << element_text(a, first, size);
  return false;
}

}  // namespace gpu_testbed
}  // namespace cakemoe
