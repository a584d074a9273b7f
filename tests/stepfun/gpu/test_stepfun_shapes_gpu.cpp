// Layer shapes the compute-sanitizer runs must reach, at sizes a sanitized run can afford
// (scripts/gpu-sanitize.sh): the Step-3.5-Flash routing (E 288, K 8, precomputed fp32 weights,
// spec §11) at small H and I, and T 2048 through every plan of tile >= 128 (r128c4 activation
// scales, tiles of two row chunks). Every family; the output against the fp64 oracle (§10.2).
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/families.h"
#include "stepfun/gpu/stepfun_gpu_case.h"
#include "testbed/gpu/gpu_testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;
namespace gt = gpu_testbed;

/// Runs `args` (device operands) with `plan` (default_plan when absent) into a poisoned output
/// and checks it against the oracle of `d`.
void run_and_check(const ref::LayerData& d, MoeArgs args, const std::optional<Plan>& plan,
                   gt::DevicePool& pool) {
  args.plan = plan;
  args.output = pool.filled({d.config.num_tokens, d.config.hidden}, DType::kBF16, 0xFF);
  const StepFunMoeLaunch launch = prepare_stepfun_moe(args);
  std::ostringstream label;
  label << d.config.describe() << " " << launch.plan();
  launch.launch();
  gt::sync_or_exit(nullptr, label.str());
  const Tensor out = gt::to_host(args.output);
  const ref::LayerCheck check = ref::check_layer_output(d, out.ptr<uint16_t>());
  EXPECT_TRUE(check.pass) << label.str() << ": " << check.summary();
}

class StepFun35ShapeE288 : public ::testing::TestWithParam<Family> {};

// Step-3.5-Flash routing with H 256 and I 320 (the TP4 slice of I 1280: an FC2 K remainder), T 16:
// 128 routes over 288 experts, most of them empty.
TEST_P(StepFun35ShapeE288, PrecomputedRoutingWithinToleranceOfOracle) {
  CAKEMOE_REQUIRE_GPU();
  ref::LayerCase c;
  c.family = GetParam();
  c.num_tokens = 16;
  c.hidden = 256;
  c.intermediate = 320;
  c.num_experts = 288;
  c.top_k = 8;
  c.limits = ref::LimitMode::k7;
  c.precomputed = true;
  c.precomputed_fp32 = true;
  const ref::LayerData d = ref::make_layer(c);
  SCOPED_TRACE(d.config.describe());
  gt::DevicePool pool;
  run_and_check(d, gt::device_args(ref::layer_args(d), pool), std::nullopt, pool);
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, StepFun35ShapeE288, ::testing::ValuesIn(kAllFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

class StepFunLargeTilesT2048 : public ::testing::TestWithParam<Family> {};

// T 2048, K 4 over 16 experts (ragged): 512 routes per expert on average, so plans_for's tile
// window holds 128 and 256; every candidate plan at those tiles runs (sm90 and portable units).
TEST_P(StepFunLargeTilesT2048, EveryPlanOfTile128And256WithinToleranceOfOracle) {
  CAKEMOE_REQUIRE_GPU();
  ref::LayerCase c;
  c.family = GetParam();
  c.num_tokens = 2048;
  c.hidden = 256;
  c.intermediate = 256;
  c.num_experts = 16;
  c.top_k = 4;
  c.regime = ref::RoutingRegime::kRagged;
  const ref::LayerData d = ref::make_layer(c);
  SCOPED_TRACE(d.config.describe());
  gt::DevicePool pool;
  const MoeArgs dev = gt::device_args(ref::layer_args(d), pool);
  ProblemDesc problem;
  problem.family = c.family;
  problem.num_tokens = c.num_tokens;
  problem.top_k = c.top_k;
  problem.local_num_experts = c.num_experts;
  problem.hidden_size = c.hidden;
  problem.intermediate_size = c.intermediate;
  problem.logits_input = true;
  problem.device = Device::cuda(0);
  std::set<int> tiles_run;
  for (const Plan& plan : plans_for(problem)) {
    if (plan.tile < 128) continue;
    run_and_check(d, dev, plan, pool);
    tiles_run.insert(plan.tile);
  }
  EXPECT_EQ(tiles_run, (std::set<int>{128, 256})) << "plans_for offered no plan at some tile";
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, StepFunLargeTilesT2048, ::testing::ValuesIn(kAllFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
