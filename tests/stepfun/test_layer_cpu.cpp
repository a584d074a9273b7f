// The whole layer through the public API on the CPU backend, against the fp64 oracle (spec §10),
// plus do_finalize=false, precomputed routing and per-stage launches matching the one-shot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "cakemoe/stepfun.h"
#include "formats/codecs.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/families.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;

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

/// Runs the prepared layer with a poisoned output and checks it against the oracle.
ref::LayerCheck run_and_check(const ref::LayerData& data) {
  MoeArgs args = ref::layer_args(data);
  Tensor output = Tensor::empty({data.config.num_tokens, data.config.hidden}, DType::kBF16);
  testbed::poison(output);
  args.output = output;
  prepare_stepfun_moe(args).launch();
  return ref::check_layer_output(data, output.ptr<uint16_t>());
}

class LayerPerFamily : public ::testing::TestWithParam<Family> {};

TEST_P(LayerPerFamily, MatchesOracleAcrossLimitsAndRegimes) {
  const ref::LimitMode modes[] = {ref::LimitMode::k7, ref::LimitMode::k16, ref::LimitMode::kMixed};
  const ref::RoutingRegime regimes[] = {ref::RoutingRegime::kUniform, ref::RoutingRegime::kRagged,
                                        ref::RoutingRegime::kRandperm};
  for (int i = 0; i < 3; ++i) {
    ref::LayerCase c = small_case(GetParam());
    c.limits = modes[i];
    c.regime = regimes[i];
    c.seed += i;
    const ref::LayerData data = ref::make_layer(c);
    const ref::LayerCheck check = run_and_check(data);
    EXPECT_TRUE(check.pass) << c.describe() << ": " << check.summary();
  }
}

TEST_P(LayerPerFamily, PrecomputedRoutingAndLocalExperts) {
  ref::LayerCase c = small_case(GetParam());
  c.precomputed = true;
  c.precomputed_fp32 = GetParam() != Family::kBF16;  // both weight dtypes across the families
  c.local_expert_offset = 2;
  c.local_num_experts = 4;
  const ref::LayerData data = ref::make_layer(c);
  const ref::LayerCheck check = run_and_check(data);
  EXPECT_TRUE(check.pass) << c.describe() << ": " << check.summary();
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, LayerPerFamily, ::testing::ValuesIn(kAllFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

TEST(Layer, OneShotEqualsPreparedAndDoFinalizeFalseRecombines) {
  const ref::LayerData data = ref::make_layer(small_case(Family::kNVFP4BF16Tok));
  MoeArgs args = ref::layer_args(data);
  const std::vector<Tensor> one_shot = stepfun_moe(args);
  ASSERT_EQ(one_shot.size(), 1u);
  const StepFunMoeLaunch launch = prepare_stepfun_moe(args);
  launch.launch();
  launch.launch();  // replays give the same bits
  ASSERT_EQ(std::memcmp(launch.outputs()[0].data, one_shot[0].data(), one_shot[0].nbytes()), 0);

  args.do_finalize = false;
  const StepFunMoeLaunch partial = prepare_stepfun_moe(args);
  partial.launch();
  const std::vector<TensorView> outs = partial.outputs();
  ASSERT_EQ(outs.size(), 3u);
  // Recombine with the public finalize stage: must equal the finalized layer bitwise.
  Tensor total = Tensor::empty({1}, DType::kInt32);
  *total.ptr<int32_t>() = static_cast<int32_t>(outs[0].shape[0]);
  Tensor output = Tensor::empty(one_shot[0].view().sizes(), DType::kBF16);
  testbed::poison(output);
  FinalizeArgs fin;
  fin.gemm2_output = outs[0];
  fin.expert_weights = outs[1];
  fin.expanded_idx_to_permuted_idx = outs[2];
  fin.total_num_padded_tokens = total;
  fin.output = output;
  fin.num_experts = data.config.num_experts;
  finalize(fin);
  EXPECT_EQ(std::memcmp(output.data(), one_shot[0].data(), output.nbytes()), 0);
}

TEST(Layer, PreparedBuffersStartZeroed) {
  // Padded rows are never written by a launch but are handed out with do_finalize = false.
  const ref::LayerData data = ref::make_layer(small_case(Family::kBF16));
  MoeArgs args = ref::layer_args(data);
  args.do_finalize = false;
  {
    // A launched layer freed first: the next prepare's buffers may reuse its dirty memory.
    const StepFunMoeLaunch earlier = prepare_stepfun_moe(args);
    earlier.launch();
  }
  const StepFunMoeLaunch partial = prepare_stepfun_moe(args);
  const std::vector<TensorView> outs = partial.outputs();
  ASSERT_EQ(outs.size(), 3u);
  for (const TensorView& v : outs) {
    const auto* bytes = static_cast<const unsigned char*>(v.data);
    const size_t nonzero = static_cast<size_t>(
        std::count_if(bytes, bytes + v.nbytes(), [](unsigned char b) { return b != 0; }));
    EXPECT_EQ(nonzero, 0u) << v.describe();
  }
  partial.launch();
  // A launch writes the routed rows: the result is not all zero any more.
  const auto* y = static_cast<const unsigned char*>(outs[0].data);
  EXPECT_TRUE(std::any_of(y, y + outs[0].nbytes(), [](unsigned char b) { return b != 0; }));
}

TEST(Layer, RoutedScalingFactorScalesTheOutput) {
  ref::LayerCase c = small_case(Family::kBF16);
  c.routed_scaling_factor = 3.0;
  const ref::LayerData data = ref::make_layer(c);
  const ref::LayerCheck check = run_and_check(data);
  EXPECT_TRUE(check.pass) << check.summary();
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe

namespace cakemoe {
namespace stepfun {
namespace {

TEST(Layer, CheckRejectsAWrongOrUnwrittenOutput) {
  const ref::LayerData data = ref::make_layer(small_case(Family::kBF16));
  ref::LayerCase other_case = small_case(Family::kBF16);
  other_case.seed += 99;
  const ref::LayerData other = ref::make_layer(other_case);
  MoeArgs args = ref::layer_args(other);
  const std::vector<Tensor> wrong = stepfun_moe(args);
  EXPECT_FALSE(ref::check_layer_output(data, wrong[0].ptr<uint16_t>()).pass);
  Tensor poisoned = Tensor::empty(wrong[0].view().sizes(), DType::kBF16);
  testbed::poison(poisoned);
  const ref::LayerCheck unwritten = ref::check_layer_output(data, poisoned.ptr<uint16_t>());
  EXPECT_FALSE(unwritten.pass);
  EXPECT_EQ(unwritten.unwritten, poisoned.numel());
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
