// Per-stage entry points: validate, then bind the stage to its backend. CPU tensors run the
// reference engine; CUDA tensors run the kernels of the catalog.
#include <memory>
#include <vector>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "reference/stepfun/finalize.h"
#include "reference/stepfun/requant.h"
#include "reference/stepfun/routing.h"
#include "reference/stepfun/tables.h"
#include "stepfun/cpu_gemm.h"
#include "stepfun/cuda_stages.h"
#include "stepfun/launch_impl.h"
#include "stepfun/validate.h"

namespace cakemoe {
namespace stepfun {
namespace ref = reference::stepfun;

namespace {

/// A stage served by a CUDA kernel unit: enqueues on the caller's stream.
class DeviceStageLaunch final : public StepFunStageLaunch::Impl {
 public:
  explicit DeviceStageLaunch(CudaEnqueue enqueue) : enqueue_(std::move(enqueue)) {}
  void launch(Stream stream) const override { enqueue_(stream); }

 private:
  CudaEnqueue enqueue_;
};

StepFunStageLaunch device_launch(CudaEnqueue enqueue) {
  return StepFunStageLaunch(std::make_shared<DeviceStageLaunch>(std::move(enqueue)));
}

bool on_cpu(Device device) { return device.type == DeviceType::kCPU; }


ref::Int32Span span(const TensorView& t) {
  return ref::Int32Span{t.defined() ? t.ptr<int32_t>() : nullptr, t.defined() ? t.numel() : 0};
}

ref::RoutingConfig routing_config(const RoutingArgs& a, int64_t num_tokens) {
  ref::RoutingConfig c;
  c.num_tokens = num_tokens;
  c.top_k = a.top_k;
  c.num_experts = a.num_experts;
  c.local_expert_offset = a.local_expert_offset;
  c.local_num_experts = a.local_num_experts;
  c.tile = a.tile_tokens_dim;
  c.routed_scaling_factor = a.routed_scaling_factor;
  c.poison_tail = a.poison_routing_tail;
  return c;
}

}  // namespace

StepFunStageLaunch::StepFunStageLaunch() = default;
StepFunStageLaunch::StepFunStageLaunch(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

void StepFunStageLaunch::launch(Stream stream) const {
  core::require(impl_ != nullptr, "launch", "this StepFunStageLaunch was default-constructed");
  impl_->launch(stream);
}

StepFunStageLaunch prepare_routing(const RoutingArgs& args) {
  const RoutingDims dims = validate_routing(args);
  if (!on_cpu(dims.device)) return device_launch(bind_cuda_routing(args, dims));
  const ref::RoutingConfig config = routing_config(args, dims.num_tokens);
  ref::check_routing_config(config);
  // Host scratch for the logits-mode ids, allocated here so launch() allocates nothing.
  auto ids =
      std::make_shared<std::vector<int32_t>>(dims.logits_input ? dims.num_tokens * args.top_k : 0);
  ref::RoutingTableViews views;
  views.expanded_idx_to_permuted_idx = span(args.expanded_idx_to_permuted_idx);
  views.permuted_idx_to_token_idx = span(args.permuted_idx_to_token_idx);
  views.cta_idx_xy_to_batch_idx = span(args.cta_idx_xy_to_batch_idx);
  views.cta_idx_xy_to_mn_limit = span(args.cta_idx_xy_to_mn_limit);
  views.num_tokens_per_expert = span(args.num_tokens_per_expert);
  views.num_non_exiting_ctas = args.num_non_exiting_ctas.ptr<int32_t>();
  views.total_num_padded_tokens = args.total_num_padded_tokens.ptr<int32_t>();
  const RoutingArgs a = args;
  return StepFunStageLaunch(std::make_shared<HostStageLaunch>([a, dims, config, ids, views] {
    const int32_t* topk_ids = a.topk_ids.ptr<int32_t>();
    if (dims.logits_input) {
      ref::route_from_logits(config, a.routing_logits.data, a.routing_logits.dtype, ids->data(),
                             a.topk_weights.ptr<uint16_t>(), a.topk_packed.ptr<int32_t>());
      topk_ids = ids->data();
    } else {
      // NOTE: the caller's ids may change between launches, so they are checked at each one.
      ref::check_distinct_topk_ids(topk_ids, dims.num_tokens, a.top_k, config.num_experts);
    }
    ref::build_tables(config, topk_ids, views);
  }));
}

StepFunStageLaunch prepare_fc1(const Fc1Args& args) {
  const GemmDims dims = validate_fc1(args);
  if (!on_cpu(args.hidden_states.device)) return device_launch(bind_cuda_fc1(args, dims));
  const Fc1Args a = args;
  return StepFunStageLaunch(std::make_shared<HostStageLaunch>([a, dims] { cpu_fc1(a, dims); }));
}

StepFunStageLaunch prepare_requant(const RequantArgs& args) {
  const int64_t rows = validate_requant(args);
  if (!on_cpu(args.gemm1_output.device)) return device_launch(bind_cuda_requant(args, rows));
  const RequantArgs a = args;
  return StepFunStageLaunch(std::make_shared<HostStageLaunch>([a, rows] {
    ref::requant_nvfp4_per_token(a.gemm1_output.ptr<uint16_t>(), rows, a.gemm1_output.shape[1],
                                 a.expanded_idx_to_permuted_idx.ptr<int32_t>(),
                                 a.expanded_idx_to_permuted_idx.numel(), a.sf_layout,
                                 a.global_scale_inv, a.output.ptr<uint8_t>(),
                                 a.output_scale.ptr<uint8_t>(), a.per_token_scale.ptr<float>());
  }));
}

StepFunStageLaunch prepare_fc2(const Fc2Args& args) {
  const GemmDims dims = validate_fc2(args);
  if (!on_cpu(args.gemm2_input.device)) return device_launch(bind_cuda_fc2(args, dims));
  const Fc2Args a = args;
  return StepFunStageLaunch(std::make_shared<HostStageLaunch>([a, dims] { cpu_fc2(a, dims); }));
}

StepFunStageLaunch prepare_finalize(const FinalizeArgs& args) {
  const int64_t hidden = validate_finalize(args);
  if (!on_cpu(args.gemm2_output.device)) return device_launch(bind_cuda_finalize(args, hidden));
  ref::FinalizeShape shape;
  shape.num_tokens = args.expert_weights.shape[0];
  shape.top_k = args.expert_weights.shape[1];
  shape.hidden = hidden;
  shape.gemm2_rows = args.gemm2_output.shape[0];
  const FinalizeArgs a = args;
  return StepFunStageLaunch(std::make_shared<HostStageLaunch>([a, shape] {
    ref::finalize(shape, a.gemm2_output.ptr<uint16_t>(), a.expert_weights.data,
                  a.expert_weights.dtype, a.expanded_idx_to_permuted_idx.ptr<int32_t>(),
                  a.output.ptr<uint16_t>());
  }));
}

void routing(const RoutingArgs& args, Stream stream) { prepare_routing(args).launch(stream); }
void fc1(const Fc1Args& args, Stream stream) { prepare_fc1(args).launch(stream); }
void requant(const RequantArgs& args, Stream stream) { prepare_requant(args).launch(stream); }
void fc2(const Fc2Args& args, Stream stream) { prepare_fc2(args).launch(stream); }
void finalize(const FinalizeArgs& args, Stream stream) { prepare_finalize(args).launch(stream); }

}  // namespace stepfun
}  // namespace cakemoe
