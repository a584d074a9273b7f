// Helpers of the StepFun GPU suite: device copies of a layer's arguments and the CPU routing
// reference of a case (byte comparisons live in gpu_testbed.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "testbed/gpu/gpu_testbed.h"
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

/// Host copies of a prepared layer's outputs (wait for the stream it ran on first).
std::vector<Tensor> host_outputs(const stepfun::StepFunMoeLaunch& launch);
/// Sets every byte of every output of `launch` to 0xFF (NaN poison) on `stream`.
void poison_outputs(const stepfun::StepFunMoeLaunch& launch, cudaStream_t stream);

}  // namespace gpu_testbed
}  // namespace cakemoe
