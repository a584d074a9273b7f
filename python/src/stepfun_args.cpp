// Keyword arguments of the StepFun entries (FlashInfer's names, spec stepfun §9.1) into the C++
// argument structs of include/cakemoe/stepfun.h. Outputs are read with write access, so
// read-only arrays are refused before anything runs.
#include "stepfun_args.h"

#include <algorithm>
#include <climits>
#include <string>

namespace cakemoe {
namespace python {

using stepfun::SfLayout;
constexpr Access kWrite = Access::kWrite;

SfLayout parse_sf_layout(const std::string& name, const std::string& argument) {
  for (SfLayout l : {SfLayout::kLinear, SfLayout::kR8C4, SfLayout::kR128C4}) {
    if (name == stepfun::sf_layout_name(l)) return l;
  }
  throw InvalidArgument(argument, "must be linear, r8c4 or r128c4, got '" + name + "'");
}

stepfun::RoutingArgs routing_args(Kwargs& kw) {
  stepfun::RoutingArgs a;
  a.routing_logits = kw.tensor("routing_logits");
  a.topk_ids = kw.tensor("topk_ids");
  // NOTE: spec §2.1: the router writes topk_weights from logits; precomputed weights are read.
  const bool writes_weights = a.routing_logits.defined() && !a.topk_ids.defined();
  a.topk_weights = kw.tensor("topk_weights", writes_weights ? kWrite : Access::kRead);
  a.topk_packed = kw.tensor("topk_packed", kWrite);
  a.expert_count_histogram = kw.tensor("expert_count_histogram", kWrite);
  a.total_num_padded_tokens = kw.tensor("total_num_padded_tokens", kWrite);
  a.expanded_idx_to_permuted_idx = kw.tensor("expanded_idx_to_permuted_idx", kWrite);
  a.permuted_idx_to_token_idx = kw.tensor("permuted_idx_to_token_idx", kWrite);
  a.cta_idx_xy_to_batch_idx = kw.tensor("cta_idx_xy_to_batch_idx", kWrite);
  a.cta_idx_xy_to_mn_limit = kw.tensor("cta_idx_xy_to_mn_limit", kWrite);
  a.num_non_exiting_ctas = kw.tensor("num_non_exiting_ctas", kWrite);
  a.num_tokens_per_expert = kw.tensor("num_tokens_per_expert", kWrite);
  a.num_experts = kw.integer("num_experts", std::nullopt);
  a.top_k = kw.integer("top_k", std::nullopt);
  a.local_expert_offset = kw.integer("local_expert_offset", 0);
  a.local_num_experts = kw.integer("local_num_experts", a.num_experts - a.local_expert_offset);
  a.tile_tokens_dim = kw.integer("tile_tokens_dim", a.tile_tokens_dim);
  a.routed_scaling_factor = kw.real("routed_scaling_factor", a.routed_scaling_factor);
  a.enable_pdl = kw.flag("enable_pdl", a.enable_pdl);
  a.poison_routing_tail = kw.flag("poison_routing_tail", a.poison_routing_tail);
  kw.finish();
  return a;
}

stepfun::Fc1Args fc1_args(Kwargs& kw) {
  stepfun::Fc1Args a;
  a.family = kw.family("family");
  a.hidden_states = kw.tensor("hidden_states");
  a.hidden_states_scale = kw.tensor("hidden_states_scale");
  a.gemm1_weights = kw.tensor("gemm1_weights");
  a.gemm1_weights_scale = kw.tensor("gemm1_weights_scale");
  a.output1_scale_scalar = kw.tensor("output1_scale_scalar");
  a.output1_scale_gate_scalar = kw.tensor("output1_scale_gate_scalar");
  a.gemm1_clamp_limit = kw.tensor("gemm1_clamp_limit");
  a.per_token_scale = kw.tensor("per_token_scale");
  a.permuted_idx_to_token_idx = kw.tensor("permuted_idx_to_token_idx");
  a.cta_idx_xy_to_batch_idx = kw.tensor("cta_idx_xy_to_batch_idx");
  a.cta_idx_xy_to_mn_limit = kw.tensor("cta_idx_xy_to_mn_limit");
  a.num_non_exiting_ctas = kw.tensor("num_non_exiting_ctas");
  a.total_num_padded_tokens = kw.tensor("total_num_padded_tokens");
  a.gemm1_output = kw.tensor("gemm1_output", kWrite);
  a.gemm1_output_scale = kw.tensor("gemm1_output_scale", kWrite);
  a.top_k = kw.integer("top_k", std::nullopt);
  a.tile_tokens_dim = kw.integer("tile_tokens_dim", a.tile_tokens_dim);
  a.enable_pdl = kw.flag("enable_pdl", a.enable_pdl);
  // NOTE: FlashInfer's flag; cakemoe's router always writes the benign tail (spec §2.4), so
  // either value gives the same result. Its type is still checked.
  kw.flag("pad_routing_tail", true);
  kw.finish();
  return a;
}

stepfun::RequantArgs requant_args(Kwargs& kw) {
  stepfun::RequantArgs a;
  a.gemm1_output = kw.tensor("gemm1_output");
  a.expanded_idx_to_permuted_idx = kw.tensor("expanded_idx_to_permuted_idx");
  a.output = kw.tensor("output", kWrite);
  a.output_scale = kw.tensor("output_scale", kWrite);
  a.per_token_scale = kw.tensor("per_token_scale", kWrite);
  a.sf_layout = parse_sf_layout(kw.text("sf_layout", "r8c4"), "sf_layout");
  a.global_scale_inv = kw.real("global_scale_inv", a.global_scale_inv);
  a.enable_pdl = kw.flag("enable_pdl", a.enable_pdl);
  kw.finish();
  return a;
}

stepfun::Fc2Args fc2_args(Kwargs& kw) {
  stepfun::Fc2Args a;
  a.family = kw.family("family");
  a.gemm2_input = kw.tensor("gemm2_input");
  a.gemm2_input_scale = kw.tensor("gemm2_input_scale");
  a.gemm2_weights = kw.tensor("gemm2_weights");
  a.gemm2_weights_scale = kw.tensor("gemm2_weights_scale");
  a.output2_scale_scalar = kw.tensor("output2_scale_scalar");
  a.per_token_scale = kw.tensor("per_token_scale");
  a.cta_idx_xy_to_batch_idx = kw.tensor("cta_idx_xy_to_batch_idx");
  a.cta_idx_xy_to_mn_limit = kw.tensor("cta_idx_xy_to_mn_limit");
  a.num_non_exiting_ctas = kw.tensor("num_non_exiting_ctas");
  a.gemm2_output = kw.tensor("gemm2_output", kWrite);
  a.num_tokens = kw.integer("num_tokens", std::nullopt);
  a.top_k = kw.integer("top_k", std::nullopt);
  a.tile_tokens_dim = kw.integer("tile_tokens_dim", a.tile_tokens_dim);
  a.enable_pdl = kw.flag("enable_pdl", a.enable_pdl);
  kw.finish();
  return a;
}

stepfun::FinalizeArgs finalize_args(Kwargs& kw) {
  stepfun::FinalizeArgs a;
  a.gemm2_output = kw.tensor("gemm2_output");
  a.expert_weights = kw.tensor("expert_weights");
  a.expanded_idx_to_permuted_idx = kw.tensor("expanded_idx_to_permuted_idx");
  a.total_num_padded_tokens = kw.tensor("total_num_padded_tokens");
  a.output = kw.tensor("output", kWrite);
  a.num_experts = kw.integer("num_experts", std::nullopt);
  a.enable_pdl = kw.flag("enable_pdl", a.enable_pdl);
  kw.finish();
  return a;
}

stepfun::MoeArgs moe_args(Kwargs& kw) {
  stepfun::MoeArgs a;
  a.family = kw.family("family");
  a.hidden_states = kw.tensor("hidden_states");
  a.hidden_states_scale = kw.tensor("hidden_states_scale");
  a.gemm1_weights = kw.tensor("gemm1_weights");
  a.gemm1_weights_scale = kw.tensor("gemm1_weights_scale");
  a.output1_scale_scalar = kw.tensor("output1_scale_scalar");
  a.output1_scale_gate_scalar = kw.tensor("output1_scale_gate_scalar");
  a.gemm1_clamp_limit = kw.tensor("gemm1_clamp_limit");
  a.per_token_scale = kw.tensor("per_token_scale");
  a.gemm2_weights = kw.tensor("gemm2_weights");
  a.gemm2_weights_scale = kw.tensor("gemm2_weights_scale");
  a.output2_scale_scalar = kw.tensor("output2_scale_scalar");
  a.routing_logits = kw.tensor("routing_logits");
  a.topk_ids = kw.tensor("topk_ids");
  a.topk_weights = kw.tensor("topk_weights");
  a.num_experts = kw.integer("num_experts", std::nullopt);
  a.top_k = kw.integer("top_k", std::nullopt);
  a.local_expert_offset = kw.integer("local_expert_offset", 0);
  a.local_num_experts = kw.integer("local_num_experts", a.num_experts - a.local_expert_offset);
  a.plan = kw.plan("plan");
  a.output = kw.tensor("output", kWrite);
  a.do_finalize = kw.flag("do_finalize", a.do_finalize);
  a.enable_pdl = kw.flag("enable_pdl", a.enable_pdl);
  a.reserved_sms = static_cast<int>(kw.integer("reserved_sms", a.reserved_sms));
  a.global_scale_inv = kw.real("global_scale_inv", a.global_scale_inv);
  a.routed_scaling_factor = kw.real("routed_scaling_factor", a.routed_scaling_factor);
  a.poison_routing_tail = kw.flag("poison_routing_tail", a.poison_routing_tail);
  a.autotune = kw.flag("autotune", a.autotune);
  // Clamped to int, not truncated: the library's [1, 1000] rule then rejects what is beyond.
  const int64_t reps = kw.integer("autotune_reps", a.autotune_reps);
  a.autotune_reps = static_cast<int>(std::clamp<int64_t>(reps, INT_MIN, INT_MAX));
  kw.finish();
  return a;
}

}  // namespace python
}  // namespace cakemoe
