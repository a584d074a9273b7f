// The whole layer: prepare_stepfun_moe allocates every intermediate buffer once and binds the five
// stages to them; launch() only replays the bound stages (no allocation, no host sync).
#include <memory>
#include <vector>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/cuda_util.h"
#include "reference/stepfun/weights.h"
#include "stepfun/launch_impl.h"
#include "stepfun/validate.h"

namespace cakemoe {
namespace stepfun {
namespace {

using core::require;
using reference::stepfun::is_nvfp4_family;

/// Rules that belong to the layer rather than to one stage (the stages check the rest).
void validate_layer(const MoeArgs& a) {
  core::check_defined(a.hidden_states, "hidden_states");
  core::check_ndim(a.hidden_states, "hidden_states", 2);
  const int64_t t = a.hidden_states.shape[0];
  require(t > 0, "hidden_states", "needs T > 0 tokens");
  require(a.routing_logits.defined() != a.topk_ids.defined(), "routing_logits",
          "exactly one of routing_logits and topk_ids must be given");
  const TensorView& routing_input = a.routing_logits.defined() ? a.routing_logits : a.topk_ids;
  core::check_ndim(routing_input, a.routing_logits.defined() ? "routing_logits" : "topk_ids", 2);
  require(routing_input.shape[0] == t, a.routing_logits.defined() ? "routing_logits" : "topk_ids",
          "must have one row per token of hidden_states (" + std::to_string(t) + ")");
  if (a.routing_logits.defined()) {
    core::check_absent(a.topk_weights, "topk_weights",
                       "with routing_logits the router computes the weights");
  } else {
    core::check_defined(a.topk_weights, "topk_weights");
  }
  core::check_defined(a.gemm1_weights, "gemm1_weights");
  require(a.gemm1_weights.ndim >= 1 && a.gemm1_weights.shape[0] == a.local_num_experts,
          "gemm1_weights",
          "must have local_num_experts = " + std::to_string(a.local_num_experts) +
              " experts in dimension 0");
  if (a.output.defined()) {
    require(a.do_finalize, "output", "is only written when do_finalize is true");
  }
  if (a.plan) {
    require(a.plan->family == a.family, "plan", "was made for another family");
  }
}

}  // namespace

class StepFunMoeLaunch::Impl {
 public:
  Plan plan;
  std::vector<Tensor> buffers;  // owned intermediates (kept alive with the launch)
  std::vector<StepFunStageLaunch> stages;
  std::vector<TensorView> outputs;

  Tensor& alloc(const std::vector<int64_t>& shape, DType dtype, Device device) {
    buffers.push_back(Tensor::empty(shape, dtype, device));
    return buffers.back();
  }
};

StepFunMoeLaunch::StepFunMoeLaunch() = default;
StepFunMoeLaunch::StepFunMoeLaunch(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

void StepFunMoeLaunch::launch(Stream stream) const {
  require(impl_ != nullptr, "launch", "this StepFunMoeLaunch was default-constructed");
  for (const StepFunStageLaunch& stage : impl_->stages) stage.launch(stream);
}

std::vector<TensorView> StepFunMoeLaunch::outputs() const {
  require(impl_ != nullptr, "outputs", "this StepFunMoeLaunch was default-constructed");
  return impl_->outputs;
}

const Plan& StepFunMoeLaunch::plan() const {
  require(impl_ != nullptr, "plan", "this StepFunMoeLaunch was default-constructed");
  return impl_->plan;
}

StepFunMoeLaunch prepare_stepfun_moe(const MoeArgs& a) {
  validate_layer(a);
  const Device device = a.hidden_states.device;
  const Family f = a.family;
  const int64_t t = a.hidden_states.shape[0], k = a.top_k, e = a.num_experts;
  auto impl = std::make_shared<StepFunMoeLaunch::Impl>();

  // Plan (given or default) on the dims the weights imply.
  ProblemDesc problem;
  problem.family = f;
  problem.num_tokens = t;
  problem.top_k = k;
  problem.local_num_experts = a.local_num_experts;
  problem.logits_input = a.routing_logits.defined();
  problem.device = device;
  {
    // H and I from the W1 view: bf16 BlockMajorK [E, H/64, 2I, 64], the others [E, 2I, H(/2)].
    const TensorView& w1 = a.gemm1_weights;
    const bool bf16 = f == Family::kBF16;
    require(w1.ndim == (bf16 ? 4 : 3), "gemm1_weights",
            std::string("family ") + family_name(f) + " expects a " + (bf16 ? "4" : "3") +
                "-D physical weight view, got " + w1.describe());
    problem.hidden_size = bf16 ? w1.shape[1] * 64 : w1.shape[2] * (is_nvfp4_family(f) ? 2 : 1);
    problem.intermediate_size = (bf16 ? w1.shape[2] : w1.shape[1]) / 2;
  }
  impl->plan = a.plan ? *a.plan : default_plan(problem);
  const int64_t tile = impl->plan.tile;
  const SfLayout layout = act_sf_layout(tile);
  require(impl->plan.act_sf_layout == layout, "plan",
          "act_sf_layout must be r8c4 for tiles <= 64 "
          "and r128c4 above");
  const int64_t h = problem.hidden_size, inter = problem.intermediate_size;

  // Buffers: routing tables sized with the global E (spec §2.5 DECISION).
  const TableSizes sizes = table_sizes(t, k, e, tile);
  const int64_t rows = sizes.max_padded;
  RoutingArgs r;
  r.routing_logits = a.routing_logits;
  r.topk_ids = a.topk_ids;
  if (a.routing_logits.defined()) {
    r.topk_weights = impl->alloc({t, k}, DType::kBF16, device);
    r.topk_packed = impl->alloc({t, k}, DType::kInt32, device);
  } else {
    r.topk_weights = a.topk_weights;
  }
  r.expert_count_histogram = impl->alloc({std::max<int64_t>(2 * e, 512)}, DType::kInt32, device);
  r.total_num_padded_tokens = impl->alloc({1}, DType::kInt32, device);
  r.expanded_idx_to_permuted_idx = impl->alloc({t * k}, DType::kInt32, device);
  r.permuted_idx_to_token_idx = impl->alloc({rows + 1}, DType::kInt32, device);
  r.cta_idx_xy_to_batch_idx = impl->alloc({sizes.max_ctas}, DType::kInt32, device);
  r.cta_idx_xy_to_mn_limit = impl->alloc({sizes.max_ctas}, DType::kInt32, device);
  r.num_non_exiting_ctas = impl->alloc({1}, DType::kInt32, device);
  r.num_experts = e;
  r.top_k = k;
  r.local_expert_offset = a.local_expert_offset;
  r.local_num_experts = a.local_num_experts;
  r.tile_tokens_dim = tile;
  r.routed_scaling_factor = a.routed_scaling_factor;
  r.enable_pdl = a.enable_pdl;
  r.poison_routing_tail = a.poison_routing_tail;
  impl->stages.push_back(prepare_routing(r));

  // FC1 (+ requant for the per-token family).
  Fc1Args f1;
  f1.family = f;
  f1.hidden_states = a.hidden_states;
  f1.hidden_states_scale = a.hidden_states_scale;
  f1.gemm1_weights = a.gemm1_weights;
  f1.gemm1_weights_scale = a.gemm1_weights_scale;
  f1.output1_scale_scalar = a.output1_scale_scalar;
  f1.output1_scale_gate_scalar = a.output1_scale_gate_scalar;
  f1.gemm1_clamp_limit = a.gemm1_clamp_limit;
  f1.per_token_scale = a.per_token_scale;
  f1.permuted_idx_to_token_idx = r.permuted_idx_to_token_idx;
  f1.cta_idx_xy_to_batch_idx = r.cta_idx_xy_to_batch_idx;
  f1.cta_idx_xy_to_mn_limit = r.cta_idx_xy_to_mn_limit;
  f1.num_non_exiting_ctas = r.num_non_exiting_ctas;
  f1.total_num_padded_tokens = r.total_num_padded_tokens;
  f1.top_k = k;
  f1.tile_tokens_dim = tile;
  f1.enable_pdl = a.enable_pdl;
  f1.kernel = impl->plan.fc1_kernel;
  if (f == Family::kNVFP4) {
    f1.gemm1_output = impl->alloc({rows, inter / 2}, DType::kE2M1x2, device);
    f1.gemm1_output_scale =
        impl->alloc({act_scale_bytes(f, layout, rows, inter)}, DType::kE4M3, device);
  } else if (f == Family::kFP8 || f == Family::kMXFP8) {
    f1.gemm1_output = impl->alloc({rows, inter}, DType::kE4M3, device);
    if (f == Family::kMXFP8) {
      f1.gemm1_output_scale =
          impl->alloc({act_scale_bytes(f, layout, rows, inter)}, DType::kUE8M0, device);
    }
  } else {
    f1.gemm1_output = impl->alloc({rows, inter}, DType::kBF16, device);
  }
  impl->stages.push_back(prepare_fc1(f1));

  Fc2Args f2;
  f2.family = f;
  f2.gemm2_input = f1.gemm1_output;
  f2.gemm2_input_scale = f1.gemm1_output_scale;
  if (f == Family::kNVFP4BF16Tok) {
    RequantArgs q;
    q.gemm1_output = f1.gemm1_output;
    q.expanded_idx_to_permuted_idx = r.expanded_idx_to_permuted_idx;
    q.output = impl->alloc({rows, inter / 2}, DType::kE2M1x2, device);
    q.output_scale = impl->alloc({act_scale_bytes(f, layout, rows, inter)}, DType::kE4M3, device);
    q.per_token_scale = impl->alloc({rows}, DType::kFP32, device);
    q.sf_layout = layout;
    q.global_scale_inv = a.global_scale_inv;
    q.enable_pdl = a.enable_pdl;
    impl->stages.push_back(prepare_requant(q));
    f2.gemm2_input = q.output;
    f2.gemm2_input_scale = q.output_scale;
    f2.per_token_scale = q.per_token_scale;
  }
  f2.gemm2_weights = a.gemm2_weights;
  f2.gemm2_weights_scale = a.gemm2_weights_scale;
  f2.output2_scale_scalar = a.output2_scale_scalar;
  f2.cta_idx_xy_to_batch_idx = r.cta_idx_xy_to_batch_idx;
  f2.cta_idx_xy_to_mn_limit = r.cta_idx_xy_to_mn_limit;
  f2.num_non_exiting_ctas = r.num_non_exiting_ctas;
  f2.gemm2_output = impl->alloc({rows, h}, DType::kBF16, device);
  f2.num_tokens = t;
  f2.top_k = k;
  f2.tile_tokens_dim = tile;
  f2.enable_pdl = a.enable_pdl;
  f2.kernel = impl->plan.fc2_kernel;
  impl->stages.push_back(prepare_fc2(f2));

  if (a.do_finalize) {
    FinalizeArgs fin;
    fin.gemm2_output = f2.gemm2_output;
    fin.expert_weights = r.topk_weights;
    fin.expanded_idx_to_permuted_idx = r.expanded_idx_to_permuted_idx;
    fin.total_num_padded_tokens = r.total_num_padded_tokens;
    fin.output = a.output.defined() ? a.output : impl->alloc({t, h}, DType::kBF16, device).view();
    fin.num_experts = e;
    fin.enable_pdl = a.enable_pdl;
    impl->stages.push_back(prepare_finalize(fin));
    impl->outputs = {fin.output};
  } else {
    impl->outputs = {f2.gemm2_output, r.topk_weights, r.expanded_idx_to_permuted_idx};
  }
  return StepFunMoeLaunch(impl);
}

std::vector<Tensor> stepfun_moe(const MoeArgs& args, Stream stream) {
  const StepFunMoeLaunch launch = prepare_stepfun_moe(args);
  launch.launch(stream);
  std::vector<Tensor> result;
  for (const TensorView& v : launch.outputs()) {
    Tensor copy = Tensor::empty(v.sizes(), v.dtype, v.device);
    core::copy_tensor(copy, v, stream);
    result.push_back(copy);
  }
  return result;
}

}  // namespace stepfun
}  // namespace cakemoe
