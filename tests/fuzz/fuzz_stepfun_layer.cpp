// StepFun whole-layer and helper entries: prepare_stepfun_moe / stepfun_moe, plans_for /
// default_plan, max_ctas / max_padded, prepare_weights, prepare_activations, the name helpers.
#include <cstring>
#include <sstream>

#include "cakemoe/stepfun.h"
#include "fuzz_entries.h"
#include "fuzz_stepfun.h"

namespace cakemoe {
namespace fuzz {

using namespace stepfun;  // NOLINT: every name here is the API under test

namespace {

// Uses a returned C string the way a caller would (and fails loudly on a null one).
void use_name(const char* name) {
  std::ostringstream os;
  os << (name != nullptr ? name : "<null>") << std::strlen(name != nullptr ? name : "");
}

Plan read_plan(FuzzInput& in) {
  Plan plan;
  plan.family = in.pick_enum<Family>(5);
  plan.tile = in.dim32();
  plan.act_sf_layout = in.pick_enum<SfLayout>(3);
  plan.fc1_kernel = in.text();
  plan.fc2_kernel = in.text();
  plan.routing_variant = in.text();
  plan.finalize_variant = in.text();
  return plan;
}

}  // namespace

/// Step limits of prepare_weights: a count selector (none, one, one per expert, a byte), values.
std::vector<float> read_step_limits(FuzzInput& in, int64_t experts) {
  const uint8_t selector = in.byte();
  int64_t count = 0;
  switch (selector % 4) {
    case 1:
      count = 1;
      break;
    case 2:
      count = experts < 0 ? 0 : (experts > 4096 ? 4096 : experts);
      break;
    case 3:
      count = in.byte();
      break;
    default:
      break;
  }
  const float value = in.scalar_f();
  std::vector<float> limits(static_cast<size_t>(count), value);
  if (count > 0 && in.flag()) limits.back() = in.scalar_f();
  return limits;
}

// T, K, E, tile.
void fuzz_bounds(FuzzInput& in, Arena&) {
  const int64_t t = in.dim(), k = in.dim(), e = in.dim(), tile = in.dim();
  if (in.flag()) {
    max_padded(t, k, e, tile);
  } else {
    max_ctas(t, k, e, tile);
  }
}

// family, T, K, E_loc, H, I, logits flag, device (type, index), a fuzzed plan, a family name.
void fuzz_plans(FuzzInput& in, Arena&) {
  ProblemDesc problem;
  problem.family = in.pick_enum<Family>(5);
  problem.num_tokens = in.dim();
  problem.top_k = in.dim();
  problem.local_num_experts = in.dim();
  problem.hidden_size = in.dim();
  problem.intermediate_size = in.dim();
  problem.logits_input = !in.flag();
  problem.device.type = in.byte() < 0xF0 ? DeviceType::kCPU : in.any_enum<DeviceType>();
  problem.device.index = static_cast<int8_t>(in.byte());
  const uint8_t op = in.byte();
  std::ostringstream os;
  switch (op % 4) {
    case 0:
      for (const Plan& plan : plans_for(problem)) os << plan;
      break;
    case 1:
      os << default_plan(problem);
      break;
    case 2:
      os << read_plan(in);
      break;
    default:
      use_name(family_name(in.any_enum<Family>()));
      use_name(sf_layout_name(in.any_enum<SfLayout>()));
      use_name(family_name(parse_family(in.text())));
      break;
  }
}

// problem, how, stream, mode byte (bit 0 ids, bit 1 fp32 routing, bit 2 own plan, bit 3 output
// given, bit 4 no finalize, bit 5 poison tail, bit 6 pdl off), reserved_sms, global_scale_inv,
// routed_scaling_factor, [plan], then the FC1 operands, FC2 weights, routing inputs and output.
void fuzz_moe(FuzzInput& in, Arena& arena) {
  const StepFunProblem p = read_problem(in);
  const int how = in.byte();
  const Stream stream = any_stream(in);
  const uint8_t mode = in.byte();
  const bool by_ids = mode & 1, fp32 = mode & 2;
  MoeArgs a;
  a.family = p.family;
  a.num_experts = p.experts;
  a.top_k = p.top_k;
  a.local_expert_offset = p.offset;
  a.local_num_experts = p.local_experts;
  a.do_finalize = !(mode & 16);
  a.poison_routing_tail = mode & 32;
  a.enable_pdl = !(mode & 64);
  a.reserved_sms = in.dim32();
  a.global_scale_inv = in.scalar();
  a.routed_scaling_factor = in.scalar();
  if (mode & 4) a.plan = read_plan(in);
  const Fc1Operands o = fc1_operands(p, arena);
  a.hidden_states = o.hidden_states;
  a.hidden_states_scale = o.hidden_states_scale;
  a.gemm1_weights = o.gemm1_weights;
  a.gemm1_weights_scale = o.gemm1_weights_scale;
  a.output1_scale_scalar = o.output1_scale_scalar;
  a.output1_scale_gate_scalar = o.output1_scale_gate_scalar;
  a.gemm1_clamp_limit = o.gemm1_clamp_limit;
  a.per_token_scale = o.per_token_scale;
  const Fc2Weights w = fc2_weights(p, arena);
  a.gemm2_weights = w.gemm2_weights;
  a.gemm2_weights_scale = w.gemm2_weights_scale;
  a.output2_scale_scalar = w.output2_scale_scalar;
  const DType route_dtype = fp32 ? DType::kFP32 : DType::kBF16;
  a.routing_logits = arena.view(route_dtype, {p.tokens, p.experts}, float_fill(), !by_ids);
  a.topk_ids = arena.view(DType::kInt32, {p.tokens, p.top_k}, index_fill(0, p.experts), by_ids);
  a.topk_weights = arena.view(route_dtype, {p.tokens, p.top_k}, float_fill(), by_ids);
  a.output = arena.view(DType::kBF16, {p.tokens, p.hidden}, const_fill(0), mode & 8);
  const int64_t per_row = wrap_add(claimed_numel(a.gemm1_weights), claimed_numel(a.gemm2_weights)) /
                          (p.local_experts > 0 ? p.local_experts : 1);
  const int64_t rows = p.rows > p.routing_rows ? p.rows : p.routing_rows;
  const bool can = affordable({rows, per_row}) && affordable({p.tokens, p.experts});
  if (!can || how % 4 == 0) {
    prepare_stepfun_moe(a);
    return;
  }
  if (how % 4 == 2) {
    stepfun_moe(a, stream);
    return;
  }
  const StepFunMoeLaunch launch = prepare_stepfun_moe(a);
  launch.launch(stream);
  if (how % 4 == 3) launch.launch(stream);
  std::ostringstream os;
  os << launch.plan() << launch.outputs().size();
}

// family, E, H, I, step limits, local offset, local count, a_gs, c_gs, then w1 and w2.
void fuzz_prepare_weights(FuzzInput& in, Arena& arena) {
  WeightPrepOptions options;
  options.family = in.pick_enum<Family>(5);
  const int64_t e = in.dim(), h = in.dim(), i = in.dim();
  options.step_limits = read_step_limits(in, e);
  options.local_expert_offset = in.dim();
  options.local_num_experts = in.dim();
  options.hidden_states_scale_global = in.scalar();
  options.intermediate_scale_global = in.scalar();
  const TensorView w1 = arena.view(DType::kBF16, {e, wrap_mul(2, i), h}, float_fill(0.05f));
  const TensorView w2 = arena.view(DType::kBF16, {e, h, i}, float_fill(0.05f));
  const StepFunWeights weights = prepare_weights(w1, w2, options);
  (void)weights.gemm1_weights.nbytes();
}

// family, T, H, a_gs, then hidden.
void fuzz_prepare_activations(FuzzInput& in, Arena& arena) {
  const Family family = in.pick_enum<Family>(5);
  const int64_t t = in.dim(), h = in.dim();
  const double a_gs = in.scalar();
  const TensorView hidden = arena.view(DType::kBF16, {t, h}, float_fill(2.0f));
  const StepFunActivations act = prepare_activations(family, hidden, a_gs);
  (void)act.hidden_states.nbytes();
}

}  // namespace fuzz
}  // namespace cakemoe
