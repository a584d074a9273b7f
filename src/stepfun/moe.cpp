// The whole layer: prepare_stepfun_moe allocates every intermediate buffer once and binds the five
// stages to them; launch() only replays the bound stages (no allocation, no host sync).
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/checked.h"
#include "core/cuda_util.h"
#include "stepfun/autotune.h"
#include "stepfun/launch_impl.h"
#include "stepfun/validate.h"

namespace cakemoe {
namespace stepfun {
namespace {

using core::require;

/// Rules that belong to the layer rather than to one stage (the stages check the rest, on the
/// planned buffers, before anything is allocated). Returns the dimensions of the weights.
GemmDims validate_layer(const MoeArgs& a) {
  check_family(a.family);
  core::check_defined(a.hidden_states, "hidden_states");
  core::check_ndim(a.hidden_states, "hidden_states", 2);
  const int64_t t = a.hidden_states.shape[0];
  require(t > 0, "hidden_states", "needs T > 0 tokens");
  core::require_in_range(t, 1, kMaxNumTokens, "hidden_states", "the number of tokens T");
  require(a.routing_logits.defined() != a.topk_ids.defined(), "routing_logits",
          "exactly one of routing_logits and topk_ids must be given");
  const TensorView& routing_input = a.routing_logits.defined() ? a.routing_logits : a.topk_ids;
  const char* routing_name = a.routing_logits.defined() ? "routing_logits" : "topk_ids";
  core::check_ndim(routing_input, routing_name, 2);
  require(routing_input.shape[0] == t, routing_name,
          "must have one row per token of hidden_states (" + std::to_string(t) + ")");
  // NOTE: the routing stage measures its buffers against its input's device; the layer's own
  // buffers live on hidden_states' device, so a routing input elsewhere must be named here.
  core::check_device(routing_input, routing_name, a.hidden_states.device);
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
  // Routing scalars, before any size is derived from them.
  require(a.num_experts > 0 && a.num_experts <= kMaxNumExperts, "num_experts",
          "must be in [1, 65535]");
  require(a.top_k >= 1 && a.top_k <= a.num_experts && a.top_k <= kMaxTopK, "top_k",
          "must satisfy 1 <= top_k <= min(num_experts, 32)");
  require(a.local_expert_offset >= 0, "local_expert_offset", "must be >= 0");
  require(a.local_expert_offset <= a.num_experts &&
              a.local_num_experts <= a.num_experts - a.local_expert_offset,
          "local_num_experts", "local_expert_offset + local_num_experts must be <= num_experts");
  // W1 and W2 must describe the same experts (the stages only see one of them each).
  const Device device = a.hidden_states.device;
  const GemmDims w1 = weight_dims(a.family, a.gemm1_weights, true, device);
  const GemmDims w2 = weight_dims(a.family, a.gemm2_weights, false, device);
  require(w2.num_local_experts == w1.num_local_experts, "gemm2_weights",
          "must hold the " + std::to_string(w1.num_local_experts) +
              " local experts of gemm1_weights, got " + a.gemm2_weights.describe());
  require(w2.hidden == w1.hidden && w2.intermediate == w1.intermediate, "gemm2_weights",
          "must be [E_loc, H, I] for the H = " + std::to_string(w1.hidden) +
              " and I = " + std::to_string(w1.intermediate) + " of gemm1_weights, got H = " +
              std::to_string(w2.hidden) + ", I = " + std::to_string(w2.intermediate));
  return w1;
}

void validate_plan(const Plan& plan) {
  check_family(plan.family);
  core::require_in_range(plan.tile, 1, kMaxTileTokensDim, "plan", "plan.tile");
  check_sf_layout(plan.act_sf_layout, "plan");
  require(plan.act_sf_layout == act_sf_layout(plan.tile), "plan",
          "act_sf_layout must be r8c4 for tiles <= 64 and r128c4 above");
}

/// Where the layer's intermediate buffers come from: the dry run hands out views of the planned
/// shapes over a placeholder (nothing allocated, nothing read); the real run allocates.
using BufferSource = std::function<TensorView(const std::vector<int64_t>&, DType)>;

/// The five stages' arguments of the layer over buffers from `buffer`.
struct LayerStages {
  RoutingArgs r;
  Fc1Args f1;
  bool has_requant = false;
  RequantArgs q;
  Fc2Args f2;
  FinalizeArgs fin;
};

LayerStages bind_stages(const MoeArgs& a, const Plan& plan, const GemmDims& dims,
                        const BufferSource& buffer) {
  const Family f = a.family;
  const int64_t t = a.hidden_states.shape[0], k = a.top_k, e = a.num_experts;
  const int64_t tile = plan.tile, h = dims.hidden, inter = dims.intermediate;
  const SfLayout layout = act_sf_layout(tile);
  // NOTE: spec §2.5 DECISION: routing tables and gemm2_output are sized with the global E; FC1
  // writes exactly the E_loc bound (spec §9.3), which its consumers read.
  const TableSizes sizes = table_sizes(t, k, e, tile);
  const int64_t rows = sizes.max_padded;
  const int64_t fc1_rows = table_sizes(t, k, a.local_num_experts, tile).max_padded;
  LayerStages s;
  RoutingArgs& r = s.r;
  r.routing_logits = a.routing_logits;
  r.topk_ids = a.topk_ids;
  if (a.routing_logits.defined()) {
    r.topk_weights = buffer({t, k}, DType::kBF16);
    r.topk_packed = buffer({t, k}, DType::kInt32);
  } else {
    r.topk_weights = a.topk_weights;
  }
  r.expert_count_histogram = buffer({std::max<int64_t>(2 * e, 512)}, DType::kInt32);
  r.total_num_padded_tokens = buffer({1}, DType::kInt32);
  r.expanded_idx_to_permuted_idx = buffer({t * k}, DType::kInt32);
  r.permuted_idx_to_token_idx = buffer({rows + 1}, DType::kInt32);
  r.cta_idx_xy_to_batch_idx = buffer({sizes.max_ctas}, DType::kInt32);
  r.cta_idx_xy_to_mn_limit = buffer({sizes.max_ctas}, DType::kInt32);
  r.num_non_exiting_ctas = buffer({1}, DType::kInt32);
  r.num_experts = e;
  r.top_k = k;
  r.local_expert_offset = a.local_expert_offset;
  r.local_num_experts = a.local_num_experts;
  r.tile_tokens_dim = tile;
  r.routed_scaling_factor = a.routed_scaling_factor;
  r.enable_pdl = a.enable_pdl;
  r.poison_routing_tail = a.poison_routing_tail;

  // FC1 (+ requant for the per-token family).
  Fc1Args& f1 = s.f1;
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
  f1.kernel = plan.fc1_kernel;
  if (f == Family::kNVFP4) {
    f1.gemm1_output = buffer({fc1_rows, inter / 2}, DType::kE2M1x2);
    f1.gemm1_output_scale = buffer({act_scale_bytes(f, layout, fc1_rows, inter)}, DType::kE4M3);
  } else if (f == Family::kFP8 || f == Family::kMXFP8) {
    f1.gemm1_output = buffer({fc1_rows, inter}, DType::kE4M3);
    if (f == Family::kMXFP8) {
      f1.gemm1_output_scale = buffer({act_scale_bytes(f, layout, fc1_rows, inter)}, DType::kUE8M0);
    }
  } else {
    f1.gemm1_output = buffer({fc1_rows, inter}, DType::kBF16);
  }

  Fc2Args& f2 = s.f2;
  f2.family = f;
  f2.gemm2_input = f1.gemm1_output;
  f2.gemm2_input_scale = f1.gemm1_output_scale;
  if (f == Family::kNVFP4BF16Tok) {
    RequantArgs& q = s.q;
    s.has_requant = true;
    q.gemm1_output = f1.gemm1_output;
    q.expanded_idx_to_permuted_idx = r.expanded_idx_to_permuted_idx;
    q.output = buffer({fc1_rows, inter / 2}, DType::kE2M1x2);
    q.output_scale = buffer({act_scale_bytes(f, layout, fc1_rows, inter)}, DType::kE4M3);
    q.per_token_scale = buffer({fc1_rows}, DType::kFP32);
    q.sf_layout = layout;
    q.global_scale_inv = a.global_scale_inv;
    q.enable_pdl = a.enable_pdl;
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
  f2.gemm2_output = buffer({rows, h}, DType::kBF16);
  f2.num_tokens = t;
  f2.top_k = k;
  f2.tile_tokens_dim = tile;
  f2.enable_pdl = a.enable_pdl;
  f2.kernel = plan.fc2_kernel;

  if (a.do_finalize) {
    FinalizeArgs& fin = s.fin;
    fin.gemm2_output = f2.gemm2_output;
    fin.expert_weights = r.topk_weights;
    fin.expanded_idx_to_permuted_idx = r.expanded_idx_to_permuted_idx;
    fin.total_num_padded_tokens = r.total_num_padded_tokens;
    fin.output = a.output.defined() ? a.output : buffer({t, h}, DType::kBF16);
    fin.num_experts = e;
    fin.enable_pdl = a.enable_pdl;
  }
  return s;
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
  const GemmDims dims = validate_layer(a);
  const Device device = a.hidden_states.device;
  const int64_t t = a.hidden_states.shape[0];

  // Plan (given or default) on the dims the weights imply.
  ProblemDesc problem;
  problem.family = a.family;
  problem.num_tokens = t;
  problem.top_k = a.top_k;
  problem.local_num_experts = a.local_num_experts;
  problem.hidden_size = dims.hidden;
  problem.intermediate_size = dims.intermediate;
  problem.logits_input = a.routing_logits.defined();
  problem.device = device;
  // An explicit plan wins; autotune (opt-in) measures plans_for's candidates or reuses its cache.
  const Plan plan = a.plan       ? *a.plan
                    : a.autotune ? autotune::autotuned_plan(a, problem)
                                 : default_plan(problem);
  validate_plan(plan);

  // Dry run: every stage validates its arguments over the planned buffers (nothing allocated).
  alignas(64) static unsigned char placeholder[64];
  const LayerStages planned =
      bind_stages(a, plan, dims, [device](const std::vector<int64_t>& shape, DType dtype) {
        return TensorView(placeholder, dtype, shape, device);
      });
  validate_routing(planned.r);
  validate_fc1(planned.f1);
  if (planned.has_requant) validate_requant(planned.q);
  validate_fc2(planned.f2);
  if (a.do_finalize) validate_finalize(planned.fin);

  auto impl = std::make_shared<StepFunMoeLaunch::Impl>();
  impl->plan = plan;
  StepFunMoeLaunch::Impl* owner = impl.get();
  const LayerStages s =
      bind_stages(a, plan, dims, [owner, device](const std::vector<int64_t>& shape, DType dtype) {
        return owner->alloc(shape, dtype, device).view();
      });
  // NOTE: the kernels write only valid rows; padded rows (and the tails of scale layouts) are
  // never written, yet a caller may copy them out (do_finalize = false hands out gemm2_output
  // whole). Zero-filled once here, nothing in the layer's memory is ever uninitialized (clean
  // under compute-sanitizer initcheck).
  core::zero_synchronously(impl->buffers);
  impl->stages.push_back(prepare_routing(s.r));
  impl->stages.push_back(prepare_fc1(s.f1));
  if (s.has_requant) impl->stages.push_back(prepare_requant(s.q));
  impl->stages.push_back(prepare_fc2(s.f2));
  if (a.do_finalize) {
    impl->stages.push_back(prepare_finalize(s.fin));
    impl->outputs = {s.fin.output};
  } else {
    impl->outputs = {s.f2.gemm2_output, s.r.topk_weights, s.r.expanded_idx_to_permuted_idx};
  }
  return StepFunMoeLaunch(impl);
}

std::vector<Tensor> stepfun_moe(const MoeArgs& args, Stream stream) {
  MoeArgs on_stream = args;
  on_stream.autotune_stream = stream;  // the one-shot measures where it runs
  const StepFunMoeLaunch launch = prepare_stepfun_moe(on_stream);
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
