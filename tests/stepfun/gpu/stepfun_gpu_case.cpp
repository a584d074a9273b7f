#include "stepfun/gpu/stepfun_gpu_case.h"

#include <algorithm>
#include <cstdlib>

#include "core/cuda_util.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace gpu_testbed {

bool stepfun_full_matrix() {
  const char* v = std::getenv("CAKEMOE_GPU_MATRIX");
  return v != nullptr && std::string(v) == "full";
}

TensorView DevicePool::copy(const TensorView& host) {
  if (!host.defined()) return TensorView();
  tensors.push_back(core::copy_to(host, Device::cuda(0)));
  return tensors.back();
}

TensorView DevicePool::filled(const std::vector<int64_t>& shape, DType dtype, int byte) {
  tensors.push_back(Tensor::empty(shape, dtype, Device::cuda(0)));
  core::fill_bytes(tensors.back(), byte);
  core::cuda_stream_sync(nullptr);
  return tensors.back();
}

stepfun::MoeArgs device_args_with_weights(const stepfun::MoeArgs& host,
                                          const stepfun::MoeArgs& weights, DevicePool& pool) {
  stepfun::MoeArgs a = host;
  a.hidden_states = pool.copy(host.hidden_states);
  a.hidden_states_scale = pool.copy(host.hidden_states_scale);
  a.per_token_scale = pool.copy(host.per_token_scale);
  a.routing_logits = pool.copy(host.routing_logits);
  a.topk_ids = pool.copy(host.topk_ids);
  a.topk_weights = pool.copy(host.topk_weights);
  a.output = pool.copy(host.output);
  a.gemm1_weights = weights.gemm1_weights;
  a.gemm1_weights_scale = weights.gemm1_weights_scale;
  a.output1_scale_scalar = weights.output1_scale_scalar;
  a.output1_scale_gate_scalar = weights.output1_scale_gate_scalar;
  a.gemm1_clamp_limit = weights.gemm1_clamp_limit;
  a.gemm2_weights = weights.gemm2_weights;
  a.gemm2_weights_scale = weights.gemm2_weights_scale;
  a.output2_scale_scalar = weights.output2_scale_scalar;
  return a;
}

stepfun::MoeArgs device_args(const stepfun::MoeArgs& host, DevicePool& pool) {
  stepfun::MoeArgs w = host;
  w.gemm1_weights = pool.copy(host.gemm1_weights);
  w.gemm1_weights_scale = pool.copy(host.gemm1_weights_scale);
  w.output1_scale_scalar = pool.copy(host.output1_scale_scalar);
  w.output1_scale_gate_scalar = pool.copy(host.output1_scale_gate_scalar);
  w.gemm1_clamp_limit = pool.copy(host.gemm1_clamp_limit);
  w.gemm2_weights = pool.copy(host.gemm2_weights);
  w.gemm2_weights_scale = pool.copy(host.gemm2_weights_scale);
  w.output2_scale_scalar = pool.copy(host.output2_scale_scalar);
  return device_args_with_weights(host, w, pool);
}

HostTables cpu_routing(const stepfun::MoeArgs& host, int64_t tile) {
  const bool logits = host.routing_logits.defined();
  const int64_t t = (logits ? host.routing_logits : host.topk_ids).shape[0];
  const int64_t k = host.top_k, e = host.num_experts;
  const int64_t ctas = stepfun::max_ctas(t, k, e, tile), rows = stepfun::max_padded(t, k, e, tile);
  HostTables h;
  const auto make = [](std::vector<int64_t> shape, DType dtype) {
    Tensor x = Tensor::empty(shape, dtype);
    testbed::poison(x);
    return x;
  };
  stepfun::RoutingArgs r;
  r.routing_logits = host.routing_logits;
  r.topk_ids = host.topk_ids;
  if (logits) {
    h.topk_weights = make({t, k}, DType::kBF16);
    h.topk_packed = make({t, k}, DType::kInt32);
    r.topk_weights = h.topk_weights;
    r.topk_packed = h.topk_packed;
  } else {
    r.topk_weights = host.topk_weights;
  }
  h.histogram = make({std::max<int64_t>(2 * e, 512)}, DType::kInt32);
  h.total_num_padded_tokens = make({1}, DType::kInt32);
  h.expanded_idx_to_permuted_idx = make({t * k}, DType::kInt32);
  h.permuted_idx_to_token_idx = make({rows + 1}, DType::kInt32);
  h.cta_idx_xy_to_batch_idx = make({ctas}, DType::kInt32);
  h.cta_idx_xy_to_mn_limit = make({ctas}, DType::kInt32);
  h.num_non_exiting_ctas = make({1}, DType::kInt32);
  r.expert_count_histogram = h.histogram;
  r.total_num_padded_tokens = h.total_num_padded_tokens;
  r.expanded_idx_to_permuted_idx = h.expanded_idx_to_permuted_idx;
  r.permuted_idx_to_token_idx = h.permuted_idx_to_token_idx;
  r.cta_idx_xy_to_batch_idx = h.cta_idx_xy_to_batch_idx;
  r.cta_idx_xy_to_mn_limit = h.cta_idx_xy_to_mn_limit;
  r.num_non_exiting_ctas = h.num_non_exiting_ctas;
  r.num_experts = e;
  r.top_k = k;
  r.local_expert_offset = host.local_expert_offset;
  r.local_num_experts = host.local_num_experts;
  r.tile_tokens_dim = tile;
  r.routed_scaling_factor = host.routed_scaling_factor;
  stepfun::prepare_routing(r).launch();
  return h;
}

std::vector<Tensor> host_outputs(const stepfun::StepFunMoeLaunch& launch) {
  std::vector<Tensor> out;
  for (const TensorView& v : launch.outputs()) out.push_back(to_host(v));
  return out;
}

void poison_outputs(const stepfun::StepFunMoeLaunch& launch, cudaStream_t stream) {
  for (const TensorView& v : launch.outputs()) core::fill_bytes(v, 0xFF, stream);
}

}  // namespace gpu_testbed
}  // namespace cakemoe
