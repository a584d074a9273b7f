// Helpers shared by the GPU suite (label gpu): skipping without a device, host<->device copies.
#pragma once

#include <gtest/gtest.h>

#include "cakemoe/tensor.h"
#include "core/cuda_util.h"

/// Skips the current test (and says why) when no CUDA device is visible.
#define CAKEMOE_REQUIRE_GPU()                                                        \
  do {                                                                               \
    if (::cakemoe::core::cuda_device_count() == 0) {                                 \
      GTEST_SKIP() << "no CUDA device visible: GPU test skipped (run it on the H200)"; \
    }                                                                                \
  } while (0)

namespace cakemoe {
namespace gpu_testbed {

/// Synchronous copies between the host and device 0.
inline Tensor to_device(const TensorView& host) { return core::copy_to(host, Device::cuda(0)); }
inline Tensor to_host(const TensorView& device) { return core::copy_to(device, Device::cpu()); }

}  // namespace gpu_testbed
}  // namespace cakemoe
