// Regression tests of issue 25 for the StepFun layer, planner, weight / activation preparation and
// configuration: hostile sizes, enums and cross-argument mismatches get a typed error naming the
// argument of the call (never a hang, a wrapped size or a blame on an internal buffer).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "cakemoe/config.h"
#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "reference/stepfun/harness.h"
#include "testbed/expect_error.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;

using testbed::expect_error;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

ref::LayerData small_layer(Family f = Family::kBF16) {
  ref::LayerCase c;
  c.family = f;
  c.num_tokens = 6;
  c.hidden = 128;
  c.intermediate = 64;
  c.num_experts = 4;
  c.top_k = 2;
  return ref::make_layer(c);
}

ProblemDesc problem(int64_t tokens, int64_t top_k, int64_t experts) {
  ProblemDesc p;
  p.family = Family::kNVFP4;
  p.num_tokens = tokens;
  p.top_k = top_k;
  p.local_num_experts = experts;
  p.hidden_size = 2048;
  p.intermediate_size = 768;
  return p;
}

TEST(PlanBounds, HugeSizesNeitherHangNorWrap) {
  // next_pow2 used to loop forever once its power of two overflowed.
  const auto start = std::chrono::steady_clock::now();
  expect_error([] { plans_for(problem(int64_t{1} << 62, 8, 1)); }, "num_tokens");
  expect_error([] { plans_for(problem(kInt64Max, kInt64Max, 1)); }, "num_tokens");
  expect_error([] { plans_for(problem(8, int64_t{1} << 62, 1)); }, "top_k");
  expect_error([] { plans_for(problem(8, 2, int64_t{1} << 40)); }, "local_num_experts");
  // The largest allowed T * K over one expert picks the top of the ladder.
  const std::vector<Plan> plans = plans_for(problem(kMaxNumTokens, kMaxTopK, 1));
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(plans.front().tile, 128);  // {prev, center} of center 256
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ProblemDesc bad_family = problem(8, 2, 4);
  bad_family.family = static_cast<Family>(148);
  expect_error([&] { default_plan(bad_family); }, "family");
  ProblemDesc huge_i = problem(8, 2, 4);
  huge_i.intermediate_size = int64_t{1} << 40;
  expect_error([&] { plans_for(huge_i); }, "intermediate_size");
}

TEST(LayerBounds, ExpertCountIsCheckedBeforeAnyBufferIsSized) {
  // The 2E histogram used to be sized (and allocated) before num_experts was validated: E = 2^62
  // wrapped the size and failed on a negative "shape" instead of naming num_experts.
  const ref::LayerData data = small_layer();
  MoeArgs a = ref::layer_args(data);
  EXPECT_NO_THROW(prepare_stepfun_moe(a));
  for (int64_t e : {int64_t{1} << 62, int64_t{1} << 31, kMaxNumExperts + 1}) {
    MoeArgs bad = a;
    bad.num_experts = e;
    expect_error([&] { prepare_stepfun_moe(bad); }, "num_experts");
  }
  MoeArgs bad = a;
  bad.local_expert_offset = kInt64Max;
  expect_error([&] { prepare_stepfun_moe(bad); }, "local_num_experts");
  bad = a;
  bad.top_k = int64_t{1} << 40;
  expect_error([&] { prepare_stepfun_moe(bad); }, "top_k");
  bad = a;
  bad.family = static_cast<Family>(148);
  expect_error([&] { prepare_stepfun_moe(bad); }, "family");
  bad = a;
  bad.routed_scaling_factor = std::numeric_limits<double>::infinity();
  expect_error([&] { prepare_stepfun_moe(bad); }, "routed_scaling_factor");
  bad = a;
  bad.plan = default_plan(problem(6, 2, 4));
  bad.plan->family = Family::kBF16;
  bad.plan->tile = int32_t{1} << 30;
  expect_error([&] { prepare_stepfun_moe(bad); }, "plan");
  bad.plan->tile = 8;
  bad.plan->act_sf_layout = static_cast<SfLayout>(5);
  expect_error([&] { prepare_stepfun_moe(bad); }, "plan");
}

TEST(LayerBounds, SecondWeightsAreCrossCheckedAndNamed) {
  const ref::LayerData data = small_layer();
  const ref::LayerData wide = [] {
    ref::LayerCase c;
    c.family = Family::kBF16;
    c.num_tokens = 6;
    c.hidden = 256;        // other H
    c.intermediate = 128;  // other I
    c.num_experts = 4;
    c.top_k = 2;
    return ref::make_layer(c);
  }();
  const MoeArgs a = ref::layer_args(data);
  const TensorView w2 = data.weights.view.gemm2_weights;  // bf16 BlockMajorK [E, I/64, H, 64]
  // Fewer experts than gemm1_weights used to pass prepare.
  MoeArgs bad = a;
  bad.gemm2_weights = TensorView(w2.data, DType::kBF16, {2, w2.shape[1], w2.shape[2], 64});
  expect_error([&] { prepare_stepfun_moe(bad); }, "gemm2_weights");
  // Another I was blamed on gemm2_input, another H on gemm2_output.
  const TensorView w2_wide = wide.weights.view.gemm2_weights;
  bad.gemm2_weights =
      TensorView(w2_wide.data, DType::kBF16, {4, w2_wide.shape[1], w2.shape[2], 64});
  expect_error([&] { prepare_stepfun_moe(bad); }, "gemm2_weights");
  bad.gemm2_weights =
      TensorView(w2_wide.data, DType::kBF16, {4, w2.shape[1], w2_wide.shape[2], 64});
  expect_error([&] { prepare_stepfun_moe(bad); }, "gemm2_weights");
}

TEST(LayerBounds, ARoutingInputOnAnotherDeviceIsNamed) {
  // The routing stage measures the layer's buffers against its input's device, so a routing input
  // away from hidden_states was blamed on the layer's own topk_weights buffer.
  const ref::LayerData data = small_layer();
  MoeArgs bad = ref::layer_args(data);
  const TensorView logits = bad.routing_logits;
  bad.routing_logits = TensorView(logits.data, logits.dtype, logits.sizes(), Device::cuda(0));
  expect_error([&] { prepare_stepfun_moe(bad); }, "routing_logits");
  expect_error([&] { stepfun_moe(bad); }, "routing_logits");
  bad.routing_logits = TensorView();
  bad.topk_ids = TensorView(logits.data, DType::kInt32, {logits.shape[0], 2}, Device::cuda(0));
  bad.topk_weights = TensorView(logits.data, DType::kFP32, {logits.shape[0], 2});
  expect_error([&] { prepare_stepfun_moe(bad); }, "topk_ids");
}

TEST(LayerBounds, LocalExpertsRunWithExactFc1Rows) {
  ref::LayerCase c;
  c.family = Family::kNVFP4BF16Tok;
  c.num_tokens = 6;
  c.hidden = 128;
  c.intermediate = 64;
  c.num_experts = 8;
  c.local_expert_offset = 4;
  c.local_num_experts = 2;
  c.top_k = 2;
  const ref::LayerData data = ref::make_layer(c);
  const std::vector<Tensor> out = stepfun_moe(ref::layer_args(data));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(ref::check_layer_output(data, out[0].ptr<uint16_t>()).pass);
}

TEST(PrepareBounds, WeightsAndActivationsRejectHostileInput) {
  testbed::Rng rng(5);
  const Tensor w1 = testbed::random_bf16({4, 128, 128}, rng, 0.1f);
  const Tensor w2 = testbed::random_bf16({4, 128, 64}, rng, 0.1f);
  WeightPrepOptions o;
  o.family = Family::kBF16;
  EXPECT_NO_THROW(prepare_weights(w1, w2, o));
  WeightPrepOptions bad = o;
  bad.family = static_cast<Family>(148);  // used to crash
  expect_error([&] { prepare_weights(w1, w2, bad); }, "family");
  bad = o;
  bad.local_expert_offset = 1;
  bad.local_num_experts = kInt64Max;
  expect_error([&] { prepare_weights(w1, w2, bad); }, "local_num_experts");
  TensorView null_w1 = w1;
  null_w1.data = nullptr;
  expect_error([&] { prepare_weights(null_w1, w2, o); }, "w1");
  TensorView negative_w2 = w2;
  negative_w2.shape[0] = -4;
  expect_error([&] { prepare_weights(w1, negative_w2, o); }, "w2");

  const Tensor hidden = testbed::random_bf16({6, 128}, rng, 1.0f);
  EXPECT_NO_THROW(prepare_activations(Family::kBF16, hidden));
  expect_error([&] { prepare_activations(static_cast<Family>(148), hidden); }, "family");
  TensorView null_hidden = hidden;
  null_hidden.data = nullptr;
  expect_error([&] { prepare_activations(Family::kBF16, null_hidden); }, "hidden");
}

TEST(ConfigBounds, RangesAndEnumsCannotOverflow) {
  MoEConfig c;
  c.routing.num_experts = 8;
  c.routing.top_k = 2;
  c.quant = quant_of(Family::kBF16);
  c.experts.intermediate_size = 128;
  EXPECT_NO_THROW(validate_config(c));
  MoEConfig bad = c;
  bad.experts.local_expert_offset = 1;
  bad.experts.local_num_experts = kInt64Max;  // the sum used to wrap and pass
  expect_error([&] { validate_config(bad); }, "experts.local_num_experts");
  bad = c;
  bad.routing_input = static_cast<RoutingInputMode>(9);  // used to read as precomputed
  expect_error([&] { validate_config(bad); }, "routing_input");
  bad = c;
  bad.routing.num_experts = int64_t{1} << 40;
  expect_error([&] { validate_config(bad); }, "routing.num_experts");
  bad = c;
  bad.experts.intermediate_size = int64_t{1} << 62;  // 2 * I wrapped in prepare_weights
  expect_error([&] { validate_config(bad); }, "experts.intermediate_size");
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
