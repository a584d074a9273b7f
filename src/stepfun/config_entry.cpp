// The entry of the unified configuration (spec stepfun §9.4): weight / activation preparation from
// a MoEConfig, the config -> MoeArgs map and run_moe / prepare_moe over stepfun_moe.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cakemoe/config.h"
#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/cuda_util.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace stepfun {
namespace {

using core::require;
using core::require_supported;

int64_t local_experts(const MoEConfig& c) {
  return c.experts.local_num_experts < 0 ? c.routing.num_experts - c.experts.local_expert_offset
                                         : c.experts.local_num_experts;
}

/// NOTE: spec §9.3: fp8 per-tensor (and static nvfp4) activations are quantized with the
/// calibrated a_gs; without it the layer has no defined input scale.
void require_activation_scale(Family family, double a_gs, const std::string& where) {
  if (family != Family::kFP8 && family != Family::kNVFP4) return;
  require(std::isfinite(a_gs) && a_gs > 0.0, "hidden_states_scale_global",
          std::string(family == Family::kFP8 ? "FP8PerTensor" : "NVFP4 (static)") +
              " requires a calibrated activation encode scale > 0 (" + where + ")");
}

void require_family(const StepFunWeights& w, Family family) {
  require(w.family == family, "weights",
          std::string("were prepared for family ") + family_name(w.family) +
              " but the config's quant selects " + family_name(family));
}

}  // namespace

void check_full_path_env() {
  const char* value = std::getenv("CAKEMOE_STEPFUN_FULL_PATH");
  if (value == nullptr) return;
  const std::string v(value);
  if (v.empty() || v == "auto" || v == "1") return;
  require_supported(v != "0", "CAKEMOE_STEPFUN_FULL_PATH",
                    "0 asks for the FC1-only hybrid path, but the FC1-only hybrid path does not "
                    "exist in cakemoe (only the full routing->FC1->FC2->finalize path is "
                    "implemented); unset it or use auto or 1");
  throw InvalidArgument("CAKEMOE_STEPFUN_FULL_PATH",
                        "must be auto, 0 or 1 (unset means auto), got '" + v + "'");
}

MoeInputs moe_inputs(const StepFunActivations& activations) {
  MoeInputs in;
  in.hidden_states = activations.hidden_states;
  in.hidden_states_scale = activations.hidden_states_scale;
  in.per_token_scale = activations.per_token_scale;
  return in;
}

StepFunWeights prepare_weights(const MoEConfig& c, const TensorView& w1, const TensorView& w2,
                               const std::vector<float>& step_limits,
                               double hidden_states_scale_global,
                               double intermediate_scale_global) {
  const Family family = validate_config(c);
  core::check_defined(w1, "w1");
  core::check_ndim(w1, "w1", 3);
  const int64_t e_loc = local_experts(c);
  const int64_t e = c.routing.num_experts;
  // w1 holds either every expert (sliced here) or exactly the local ones.
  require(w1.shape[0] == e || w1.shape[0] == e_loc, "w1",
          "must hold num_experts = " + std::to_string(e) + " or local_num_experts = " +
              std::to_string(e_loc) + " experts in dimension 0, got " + w1.describe());
  require(w1.shape[1] == 2 * c.experts.intermediate_size, "experts.intermediate_size",
          "w1 must have 2 * intermediate_size = " +
              std::to_string(2 * c.experts.intermediate_size) + " rows, got " + w1.describe());
  // NOTE: spec §3.2: one limit per physical expert row; fused shared experts are rejected, so
  // the rows are exactly the local experts.
  require(step_limits.empty() || static_cast<int64_t>(step_limits.size()) == e_loc,
          "step_limits",
          "needs one limit per physical expert row (" + std::to_string(e_loc) + "), got " +
              std::to_string(step_limits.size()) + " (empty: activation.limit for every expert)");
  require_activation_scale(family, hidden_states_scale_global, "prepare_weights");
  WeightPrepOptions o;
  o.family = family;
  o.step_limits = step_limits.empty() ? std::vector<float>(e_loc, c.activation.limit) : step_limits;
  o.local_expert_offset = w1.shape[0] == e ? c.experts.local_expert_offset : 0;
  o.local_num_experts = e_loc;
  o.hidden_states_scale_global = hidden_states_scale_global;
  o.intermediate_scale_global = intermediate_scale_global;
  return prepare_weights(w1, w2, o);
}

StepFunActivations prepare_activations(const MoEConfig& c, const StepFunWeights& weights,
                                       const TensorView& hidden) {
  const Family family = validate_config(c);
  require_family(weights, family);
  require_activation_scale(family, weights.hidden_states_scale_global, "weights");
  return prepare_activations(family, hidden, weights.hidden_states_scale_global);
}

MoeArgs moe_args(const MoEConfig& c, const StepFunWeights& w, const MoeInputs& in) {
  const Family family = validate_config(c);
  require_family(w, family);
  require_activation_scale(family, w.hidden_states_scale_global, "weights");
  core::check_defined(in.hidden_states, "hidden_states");
  core::check_defined(w.gemm1_weights, "gemm1_weights");
  const int64_t e_loc = local_experts(c);
  require(w.gemm1_weights.size(0) == e_loc, "experts.local_num_experts",
          "the weights hold " + std::to_string(w.gemm1_weights.size(0)) +
              " experts, the config " + std::to_string(e_loc));
  // bf16 weights are BlockMajorK [E, H/64, 2I, 64]; the others [E, 2I, ...] (spec §4.2).
  const int64_t rows =
      family == Family::kBF16 ? w.gemm1_weights.size(2) : w.gemm1_weights.size(1);
  require(rows == 2 * c.experts.intermediate_size, "experts.intermediate_size",
          "is " + std::to_string(c.experts.intermediate_size) + " but the weights have I = " +
              std::to_string(rows / 2));
  core::check_defined(w.gemm1_clamp_limit, "gemm1_clamp_limit");
  require(w.gemm1_clamp_limit.numel() == e_loc, "gemm1_clamp_limit",
          "needs one limit per physical expert row (" + std::to_string(e_loc) + "), got " +
              std::to_string(w.gemm1_clamp_limit.numel()));

  const bool logits = c.routing_input == RoutingInputMode::kFromLogits;
  if (logits) {
    require(in.routing_logits.defined(), "routing_logits",
            "routing_input FromLogits needs routing_logits [T, E]");
    require(!in.topk_ids.defined() && !in.topk_weights.defined(), "topk_ids",
            "must be absent with routing_input FromLogits");
  } else {
    require(in.topk_ids.defined() && in.topk_weights.defined(), "topk_ids",
            "routing_input UnpackedPrecomputed needs topk_ids and topk_weights [T, K]");
    require(!in.routing_logits.defined(), "routing_logits",
            "must be absent with routing_input UnpackedPrecomputed");
  }
  const Device device = in.hidden_states.device;
  if (device.type == DeviceType::kCUDA) {
    const int cc = core::cuda_capability(device.index);
    require_supported(CakeStepFunConfig::supported(cc), "backend",
                      "cake_stepfun has kernels for compute capability 90, 100 and 103; " +
                          core::device_string(device) + " is " + std::to_string(cc));
  }

  MoeArgs a;
  a.family = family;
  a.hidden_states = in.hidden_states;
  a.hidden_states_scale = in.hidden_states_scale;
  a.per_token_scale = in.per_token_scale;
  reference::stepfun::set_weight_args(&a, w);
  a.routing_logits = in.routing_logits;
  a.topk_ids = in.topk_ids;
  a.topk_weights = in.topk_weights;
  a.num_experts = c.routing.num_experts;
  a.top_k = c.routing.top_k;
  a.local_expert_offset = c.experts.local_expert_offset;
  a.local_num_experts = e_loc;
  a.output = in.output;
  a.do_finalize = c.finalize.do_finalize;
  a.enable_pdl = c.execution.enable_pdl;
  a.routed_scaling_factor = logits ? c.routing.routed_scaling_factor.value_or(1.0) : 1.0;
  return a;
}

StepFunMoeLaunch prepare_moe(const MoEConfig& c, const StepFunWeights& w, const MoeInputs& in) {
  check_full_path_env();
  return prepare_stepfun_moe(moe_args(c, w, in));
}

std::vector<Tensor> run_moe(const MoEConfig& c, const StepFunWeights& w, const MoeInputs& in,
                            Stream stream) {
  check_full_path_env();
  return stepfun_moe(moe_args(c, w, in), stream);
}

}  // namespace stepfun
}  // namespace cakemoe
