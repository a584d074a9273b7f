// Helpers of the StepFun GPU suite: device copies of a layer's arguments, the CPU routing
// reference of a case, and byte comparisons that say where two buffers first differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "reference/stepfun/harness.h"

namespace cakemoe {
namespace gpu_testbed {

/// True when CAKEMOE_GPU_MATRIX=full (the whole §10.3 matrix); default "small".
bool stepfun_full_matrix();

/// Device copies that stay alive as long as the pool.
struct DevicePool {
  std::vector<Tensor> tensors;
  /// A device copy of `host` (undefined stays undefined).
  TensorView copy(const TensorView& host);
  /// A device tensor whose bytes are all `byte`.
  TensorView filled(const std::vector<int64_t>& shape, DType dtype, int byte);
};

/// `host` with every tensor operand copied to device 0 (weights, activations, routing inputs).
stepfun::MoeArgs device_args(const stepfun::MoeArgs& host, DevicePool& pool);
/// Only the per-T operands of `host` (activations, routing inputs) copied; weights from `weights`.
stepfun::MoeArgs device_args_with_weights(const stepfun::MoeArgs& host,
                                          const stepfun::MoeArgs& weights, DevicePool& pool);

/// The routing tables of the CPU reference for `host` (CPU tensors) at `tile`, sized as
/// prepare_stepfun_moe sizes them (global E, spec §2.5), poisoned before routing.
struct HostTables {
  Tensor topk_weights, topk_packed, histogram, total_num_padded_tokens;
  Tensor expanded_idx_to_permuted_idx, permuted_idx_to_token_idx;
  Tensor cta_idx_xy_to_batch_idx, cta_idx_xy_to_mn_limit, num_non_exiting_ctas;
};
HostTables cpu_routing(const stepfun::MoeArgs& host, int64_t tile);

/// "" when the first `bytes` bytes of host buffers a and b are equal, else where they first differ
/// (element index in `element_bytes` units, both values in hex) and how many elements differ.
std::string diff_bytes(const void* a, const void* b, size_t bytes, size_t element_bytes);
/// Device view vs host view of the same shape: diff_bytes of their contents.
std::string diff_device_host(const TensorView& device, const TensorView& host);

}  // namespace gpu_testbed
}  // namespace cakemoe
