// Unified-config entries (cakemoe/config.h): validate_config, the enum helpers, the env check,
// and the layer path prepare_weights(config) -> prepare_activations(config) -> moe_args /
// prepare_moe / run_moe.
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cakemoe/config.h"
#include "fuzz_entries.h"
#include "fuzz_stepfun.h"

namespace cakemoe {
namespace fuzz {

using namespace stepfun;  // NOLINT: every name here is the API under test

namespace {

constexpr const char* kFullPathEnv = "CAKEMOE_STEPFUN_FULL_PATH";

void use_name(const char* name) {
  std::ostringstream os;
  os << (name != nullptr ? name : "<null>") << std::strlen(name != nullptr ? name : "");
}

// Field by field, in MoEConfig order; routing_bias is a view (natural: absent, fp32 [E]).
MoEConfig read_config(FuzzInput& in, Arena& arena) {
  MoEConfig c;
  c.routing.num_experts = in.dim();
  c.routing.top_k = in.dim();
  c.routing.method = in.pick_enum<RoutingMethod>(6);
  c.routing.use_routing_bias = in.flag();
  c.routing.routing_bias = arena.view(DType::kFP32, {c.routing.num_experts}, float_fill(), false);
  c.routing.n_group = in.dim();
  c.routing.topk_group = in.dim();
  if (in.flag()) c.routing.routed_scaling_factor = in.scalar();
  c.quant.weights = in.pick_enum<QuantFormat>(6);
  c.quant.activations = in.flag() ? in.pick_enum<QuantFormat>(6) : c.quant.weights;
  c.quant.per_token_scale = in.flag();
  c.experts.intermediate_size = in.dim();
  c.experts.local_expert_offset = in.dim();
  c.experts.local_num_experts = in.dim();
  c.experts.num_fused_shared_experts = in.dim();
  c.activation.type = in.pick_enum<ActivationType>(6);
  c.activation.limit = in.scalar_f();
  if (in.flag()) c.backend.backend = in.text();
  c.routing_input = in.pick_enum<RoutingInputMode>(3);
  c.execution.enable_pdl = in.flag();
  c.execution.tune_max_num_tokens = in.dim();
  c.finalize.do_finalize = !in.flag();
  c.lora_deltas = in.flag();
  return c;
}

// Sets the full-path switch for one scope (nothing else in the fuzzer reads it).
class ScopedFullPathEnv {
 public:
  explicit ScopedFullPathEnv(FuzzInput& in) {
    switch (in.byte() % 5) {
      case 0:
        unsetenv(kFullPathEnv);
        break;
      case 1:
        setenv(kFullPathEnv, "1", 1);
        break;
      case 2:
        setenv(kFullPathEnv, "0", 1);
        break;
      case 3:
        setenv(kFullPathEnv, "auto", 1);
        break;
      default:
        setenv(kFullPathEnv, in.text().c_str(), 1);
        break;
    }
  }
  ~ScopedFullPathEnv() { unsetenv(kFullPathEnv); }
  ScopedFullPathEnv(const ScopedFullPathEnv&) = delete;
  ScopedFullPathEnv& operator=(const ScopedFullPathEnv&) = delete;
};

}  // namespace

// config, then an op byte: validate_config, family_of / quant_of, names, the env check.
void fuzz_config(FuzzInput& in, Arena& arena) {
  const MoEConfig config = read_config(in, arena);
  const int op = in.byte() % 4;
  if (op != 0) arena.mark_views_unused();  // routing_bias reaches validate_config only
  switch (op) {
    case 0:
      validate_config(config);
      break;
    case 1: {
      const QuantConfig q = quant_of(in.any_enum<Family>());
      use_name(family_name(family_of(in.flag() ? q : config.quant)));
      break;
    }
    case 2:
      use_name(routing_method_name(in.any_enum<RoutingMethod>()));
      use_name(quant_format_name(in.any_enum<QuantFormat>()));
      use_name(activation_name(in.any_enum<ActivationType>()));
      CakeStepFunConfig::supported(in.dim32());
      break;
    default: {
      const ScopedFullPathEnv env(in);
      check_full_path_env();
      break;
    }
  }
}

// config, T, H, step limits, a_gs, c_gs, how (0 weights, 1 + activations, 2 + moe_args,
// 3 + prepare_moe and launch, 4 run_moe), stream, env, then w1, w2, hidden, routing inputs,
// output.
void fuzz_config_layer(FuzzInput& in, Arena& arena) {
  const MoEConfig config = read_config(in, arena);
  const int64_t e = config.routing.num_experts, k = config.routing.top_k;
  const int64_t i = config.experts.intermediate_size;
  const int64_t t = in.dim(), h = in.dim();
  const std::vector<float> limits = read_step_limits(in, config.experts.local_num_experts);
  const double a_gs = in.scalar(), c_gs = in.scalar();
  const int how = in.byte() % 5;
  const Stream stream = any_stream(in);
  const ScopedFullPathEnv env(in);
  const TensorView w1 = arena.view(DType::kBF16, {e, wrap_mul(2, i), h}, float_fill(0.05f));
  const TensorView w2 = arena.view(DType::kBF16, {e, h, i}, float_fill(0.05f));
  const TensorView hidden = arena.view(DType::kBF16, {t, h}, float_fill(2.0f));
  const bool by_ids = config.routing_input != RoutingInputMode::kFromLogits;
  MoeInputs routes;
  routes.routing_logits = arena.view(DType::kBF16, {t, e}, float_fill(), !by_ids);
  routes.topk_ids = arena.view(DType::kInt32, {t, k}, index_fill(0, e), by_ids);
  routes.topk_weights = arena.view(DType::kFP32, {t, k}, float_fill(), by_ids);
  routes.output = arena.view(DType::kBF16, {t, h}, const_fill(0), false);

  // hidden reaches the library from how 1, the routing inputs from how 3 (moe_args only pairs
  // them), routing_bias from prepare_weights' validate_config on.
  if (how < 3) arena.mark_views_unused();
  const StepFunWeights weights = prepare_weights(config, w1, w2, limits, a_gs, c_gs);
  if (how == 0) return;
  const StepFunActivations act = prepare_activations(config, weights, hidden);
  if (how == 1) return;
  MoeInputs inputs = moe_inputs(act);
  inputs.routing_logits = routes.routing_logits;
  inputs.topk_ids = routes.topk_ids;
  inputs.topk_weights = routes.topk_weights;
  inputs.output = routes.output;
  const MoeArgs args = moe_args(config, weights, inputs);
  if (how == 2) return;
  // The layer's compute: T * K routed rows (plus tile padding) through 3 * I * H weights.
  if (!affordable({wrap_add(wrap_mul(t, k), wrap_mul(e, 256)), wrap_mul(3, i), h})) {
    prepare_stepfun_moe(args);
    return;
  }
  if (how == 3) {
    prepare_moe(config, weights, inputs).launch(stream);
  } else {
    run_moe(config, weights, inputs, stream);
  }
}

}  // namespace fuzz
}  // namespace cakemoe
