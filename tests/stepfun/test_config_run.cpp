// The unified configuration entry on the CPU backend: prepare_weights from a MoEConfig, run_moe
// against the fp64 oracle and against stepfun_moe, the pairing checks of moe_args, and the
// environment switch (spec §9.3, §9.4).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cakemoe/config.h"
#include "cakemoe/errors.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/families.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;
using testbed::random_bf16;

template <typename Error>
void expect_named(const std::function<void()>& fn, const std::string& arg,
                  const std::string& words) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one for " << arg;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  } catch (const cakemoe::Error& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

bool same_view(const StepFunWeights& a, const StepFunWeights& b) {
  return a.family == b.family && same_bytes(a.gemm1_weights, b.gemm1_weights) &&
         same_bytes(a.gemm1_weights_scale, b.gemm1_weights_scale) &&
         same_bytes(a.gemm2_weights, b.gemm2_weights) &&
         same_bytes(a.gemm2_weights_scale, b.gemm2_weights_scale) &&
         same_bytes(a.output1_scale_scalar, b.output1_scale_scalar) &&
         same_bytes(a.output1_scale_gate_scalar, b.output1_scale_gate_scalar) &&
         same_bytes(a.output2_scale_scalar, b.output2_scale_scalar) &&
         same_bytes(a.gemm1_clamp_limit, b.gemm1_clamp_limit);
}

constexpr int64_t kE = 4, kH = 128, kI = 64;

MoEConfig weight_config(Family f) {
  MoEConfig c;
  c.routing.num_experts = kE;
  c.routing.top_k = 2;
  c.quant = quant_of(f);
  c.experts.intermediate_size = kI;
  c.activation = swiglu_step(16.0f);
  return c;
}

TEST(ConfigWeights, LimitsInFamilyUnitsAndLocalSlices) {
  testbed::Rng rng(31);
  const Tensor w1 = random_bf16({kE, 2 * kI, kH}, rng, 0.1f);
  const Tensor w2 = random_bf16({kE, kH, kI}, rng, 0.1f);
  for (Family f : kAllFamilies) {
    SCOPED_TRACE(family_name(f));
    MoEConfig c = weight_config(f);
    const double a_gs = 2.5;
    // Default: activation.limit for every expert; explicit: one per expert.
    const StepFunWeights dflt = prepare_weights(c, w1, w2, {}, a_gs);
    const std::vector<float> limits = {7.f, 16.f, 7.f, 3.5f};
    const StepFunWeights mixed = prepare_weights(c, w1, w2, limits, a_gs);
    ASSERT_EQ(mixed.gemm1_clamp_limit.numel(), kE);
    const bool raw_units = f == Family::kFP8 || f == Family::kNVFP4 || f == Family::kNVFP4BF16Tok;
    for (int64_t e = 0; e < kE; ++e) {
      // NOTE: spec §3.2: raw-accumulator units are L / output1_scale_gate_scalar.
      const float sg = raw_units ? mixed.output1_scale_gate_scalar.ptr<float>()[e] : 1.f;
      EXPECT_FLOAT_EQ(mixed.gemm1_clamp_limit.ptr<float>()[e], limits[e] / sg) << e;
      EXPECT_FLOAT_EQ(dflt.gemm1_clamp_limit.ptr<float>()[e], 16.f / sg) << e;
    }
    // The config path is the WeightPrepOptions path with the config's fields.
    WeightPrepOptions o;
    o.family = f;
    o.step_limits = limits;
    o.hidden_states_scale_global = a_gs;
    EXPECT_TRUE(same_view(mixed, prepare_weights(w1, w2, o)));
    // Local experts [1, 3): from the full tensors or from the local slice, same bytes.
    c.experts.local_expert_offset = 1;
    c.experts.local_num_experts = 2;
    const StepFunWeights from_full = prepare_weights(c, w1, w2, {7.f, 16.f}, a_gs);
    Tensor w1_loc = Tensor::empty({2, 2 * kI, kH}, DType::kBF16);
    Tensor w2_loc = Tensor::empty({2, kH, kI}, DType::kBF16);
    std::memcpy(w1_loc.data(), w1.ptr<uint16_t>() + 2 * kI * kH, w1_loc.nbytes());
    std::memcpy(w2_loc.data(), w2.ptr<uint16_t>() + kH * kI, w2_loc.nbytes());
    const StepFunWeights from_local = prepare_weights(c, w1_loc, w2_loc, {7.f, 16.f}, a_gs);
    EXPECT_EQ(from_full.gemm1_weights.size(0), 2);
    EXPECT_TRUE(same_view(from_full, from_local));
  }
}

TEST(ConfigWeights, Rejections) {
  testbed::Rng rng(32);
  const Tensor w1 = random_bf16({kE, 2 * kI, kH}, rng, 0.1f);
  const Tensor w2 = random_bf16({kE, kH, kI}, rng, 0.1f);
  const MoEConfig fp8 = weight_config(Family::kFP8);
  expect_named<InvalidArgument>([&] { prepare_weights(fp8, w1, w2, {}, 0.0); },
                                "hidden_states_scale_global", "FP8PerTensor requires");
  const MoEConfig nv = weight_config(Family::kNVFP4);
  expect_named<InvalidArgument>([&] { prepare_weights(nv, w1, w2, {7.f, 7.f}, 1.0); },
                                "step_limits", "one limit per physical expert row (4)");
  expect_named<InvalidArgument>([&] { prepare_weights(nv, w1, w2, {7.f}, 1.0); }, "step_limits",
                                "one limit per physical expert row");
  MoEConfig wrong_i = nv;
  wrong_i.experts.intermediate_size = 128;
  expect_named<InvalidArgument>([&] { prepare_weights(wrong_i, w1, w2, {}, 1.0); },
                                "experts.intermediate_size", "2 * intermediate_size = 256");
  MoEConfig wrong_e = nv;
  wrong_e.routing.num_experts = 6;
  expect_named<InvalidArgument>([&] { prepare_weights(wrong_e, w1, w2, {}, 1.0); }, "w1",
                                "num_experts = 6");
  MoEConfig shared = nv;
  shared.experts.num_fused_shared_experts = 2;
  expect_named<Unsupported>([&] { prepare_weights(shared, w1, w2, {}, 1.0); },
                            "experts.num_fused_shared_experts", "not supported");
  // The per-token and block-scaled families need no static a_gs.
  EXPECT_NO_THROW(prepare_weights(weight_config(Family::kNVFP4BF16Tok), w1, w2, {}, 0.0));
  EXPECT_NO_THROW(prepare_weights(weight_config(Family::kMXFP8), w1, w2, {}, 0.0));
}

ref::LayerCase small_case(Family f) {
  ref::LayerCase c;
  c.family = f;
  c.num_tokens = 24;
  c.hidden = 256;
  c.intermediate = 128;
  c.num_experts = 8;
  c.top_k = 2;
  return c;
}

MoEConfig config_for(const ref::LayerData& d) {
  MoEConfig c;
  c.routing.num_experts = d.config.num_experts;
  c.routing.top_k = d.config.top_k;
  if (d.config.routed_scaling_factor != 1.0) {
    c.routing.routed_scaling_factor = d.config.routed_scaling_factor;
  }
  c.quant = quant_of(d.config.family);
  c.experts.intermediate_size = d.config.intermediate;
  c.experts.local_expert_offset = d.config.local_expert_offset;
  c.experts.local_num_experts = d.weights.dims.num_experts;
  c.routing_input = d.config.precomputed ? RoutingInputMode::kUnpackedPrecomputed
                                         : RoutingInputMode::kFromLogits;
  return c;
}

MoeInputs inputs_for(const ref::LayerData& d) {
  MoeInputs in = moe_inputs(d.activations);
  if (d.config.precomputed) {
    in.topk_ids = d.topk_ids;
    in.topk_weights = d.topk_weights;
  } else {
    in.routing_logits = d.routing_logits;
  }
  return in;
}

class ConfigRun : public ::testing::TestWithParam<Family> {};

TEST_P(ConfigRun, MatchesOracleAndStepfunMoe) {
  ref::LayerCase lc = small_case(GetParam());
  lc.routed_scaling_factor = GetParam() == Family::kMXFP8 ? 3.0 : 1.0;
  const ref::LayerData d = ref::make_layer(lc);
  const std::vector<Tensor> out = run_moe(config_for(d), d.weights.view, inputs_for(d));
  ASSERT_EQ(out.size(), 1u);
  const ref::LayerCheck check = ref::check_layer_output(d, out[0].ptr<uint16_t>());
  EXPECT_TRUE(check.pass) << lc.describe() << ": " << check.summary();
  const std::vector<Tensor> direct = stepfun_moe(ref::layer_args(d));
  EXPECT_TRUE(same_bytes(out[0], direct[0]));
}

TEST_P(ConfigRun, PrecomputedLocalExpertsAndDoFinalizeFalse) {
  ref::LayerCase lc = small_case(GetParam());
  lc.precomputed = true;
  lc.precomputed_fp32 = GetParam() != Family::kFP8;
  lc.local_expert_offset = 3;
  lc.local_num_experts = 4;
  const ref::LayerData d = ref::make_layer(lc);
  MoEConfig c = config_for(d);
  MoeInputs in = inputs_for(d);
  Tensor output = Tensor::empty({lc.num_tokens, lc.hidden}, DType::kBF16);
  testbed::poison(output);
  in.output = output;
  prepare_moe(c, d.weights.view, in).launch();
  const ref::LayerCheck check = ref::check_layer_output(d, output.ptr<uint16_t>());
  EXPECT_TRUE(check.pass) << lc.describe() << ": " << check.summary();

  c.finalize.do_finalize = false;
  in.output = TensorView();
  const std::vector<Tensor> parts = run_moe(c, d.weights.view, in);
  MoeArgs args = ref::layer_args(d);
  args.do_finalize = false;
  const std::vector<Tensor> direct = stepfun_moe(args);
  ASSERT_EQ(parts.size(), 3u);
  ASSERT_EQ(direct.size(), 3u);
  EXPECT_TRUE(same_bytes(parts[1], direct[1]));  // expert_weights
  EXPECT_TRUE(same_bytes(parts[2], direct[2]));  // expanded_idx_to_permuted_idx
  // gemm2_output: only the rows the tables point at are defined (padding rows are not written).
  const int32_t* e2p = parts[2].ptr<int32_t>();
  const int64_t h = lc.hidden;
  int64_t compared = 0;
  for (int64_t i = 0; i < parts[2].numel(); ++i) {
    if (e2p[i] < 0) continue;
    ++compared;
    ASSERT_EQ(std::memcmp(parts[0].ptr<uint16_t>() + e2p[i] * h,
                          direct[0].ptr<uint16_t>() + e2p[i] * h, h * sizeof(uint16_t)), 0)
        << "row " << e2p[i];
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, ConfigRun, ::testing::ValuesIn(kAllFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

TEST(ConfigRunChecks, PairingOfConfigWeightsAndInputs) {
  const ref::LayerData d = ref::make_layer(small_case(Family::kFP8));
  const MoEConfig c = config_for(d);
  Tensor output = Tensor::empty({24, 256}, DType::kBF16);
  testbed::poison(output);
  MoeInputs in = inputs_for(d);
  in.output = output;
  const StepFunWeights& w = d.weights.view;
  const auto run = [&](const MoEConfig& cc, const StepFunWeights& ww, const MoeInputs& ii) {
    return [cc, ww, ii] { run_moe(cc, ww, ii); };
  };

  MoEConfig other = c;
  other.quant = QuantConfig::mxfp8();
  expect_named<InvalidArgument>(run(other, w, in), "weights", "prepared for family fp8");
  other = c;
  other.experts.intermediate_size = 64;
  expect_named<InvalidArgument>(run(other, w, in), "experts.intermediate_size", "I = 128");
  other = c;
  other.experts.local_num_experts = 7;
  expect_named<InvalidArgument>(run(other, w, in), "experts.local_num_experts", "hold 8");
  other = c;
  other.routing_input = RoutingInputMode::kUnpackedPrecomputed;
  expect_named<InvalidArgument>(run(other, w, in), "topk_ids", "needs topk_ids");
  other.routing_input = RoutingInputMode::kPackedPrecomputed;
  expect_named<Unsupported>(run(other, w, in), "routing_input", "PackedPrecomputed");
  MoeInputs both = in;
  both.topk_ids = d.routing_logits;
  expect_named<InvalidArgument>(run(c, w, both), "topk_ids", "must be absent");
  MoeInputs none = in;
  none.routing_logits = TensorView();
  expect_named<InvalidArgument>(run(c, w, none), "routing_logits", "needs routing_logits");
  StepFunWeights no_scale = w;
  no_scale.hidden_states_scale_global = 0.0;
  expect_named<InvalidArgument>(run(c, no_scale, in), "hidden_states_scale_global",
                                "FP8PerTensor requires");
  StepFunWeights limits = w;
  limits.gemm1_clamp_limit = Tensor::empty({9}, DType::kFP32);
  expect_named<InvalidArgument>(run(c, limits, in), "gemm1_clamp_limit",
                                "one limit per physical expert row (8)");
  other = c;
  other.activation.type = ActivationType::kSwiGLU;
  expect_named<Unsupported>(run(other, w, in), "activation", "SwiGLUStep");
  // Nothing was written by any rejected call.
  const uint16_t* o = output.ptr<uint16_t>();
  for (int64_t i = 0; i < output.numel(); ++i) ASSERT_EQ(o[i], 0xFFFF) << i;
}

TEST(ConfigRunChecks, FullPathZeroRefusesBeforeWriting) {
  const ref::LayerData d = ref::make_layer(small_case(Family::kBF16));
  Tensor output = Tensor::empty({24, 256}, DType::kBF16);
  testbed::poison(output);
  MoeInputs in = inputs_for(d);
  in.output = output;
  const char* saved = std::getenv("CAKEMOE_STEPFUN_FULL_PATH");
  const std::string saved_value = saved ? saved : "";
  setenv("CAKEMOE_STEPFUN_FULL_PATH", "0", 1);
  expect_named<Unsupported>([&] { run_moe(config_for(d), d.weights.view, in); },
                            "CAKEMOE_STEPFUN_FULL_PATH", "hybrid");
  expect_named<Unsupported>([&] { prepare_moe(config_for(d), d.weights.view, in); },
                            "CAKEMOE_STEPFUN_FULL_PATH", "hybrid");
  setenv("CAKEMOE_STEPFUN_FULL_PATH", "yes", 1);
  expect_named<InvalidArgument>([&] { run_moe(config_for(d), d.weights.view, in); },
                                "CAKEMOE_STEPFUN_FULL_PATH", "auto, 0 or 1");
  const uint16_t* o = output.ptr<uint16_t>();
  for (int64_t i = 0; i < output.numel(); ++i) ASSERT_EQ(o[i], 0xFFFF) << i;
  setenv("CAKEMOE_STEPFUN_FULL_PATH", "1", 1);
  run_moe(config_for(d), d.weights.view, in);
  EXPECT_TRUE(ref::check_layer_output(d, o).pass);
  if (saved) {
    setenv("CAKEMOE_STEPFUN_FULL_PATH", saved_value.c_str(), 1);
  } else {
    unsetenv("CAKEMOE_STEPFUN_FULL_PATH");
  }
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
