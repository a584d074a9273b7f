// A plan's unit names: on the CPU backend the default plan names the reference units (path
// "cpu"), and a plan made for a GPU (its units named) still runs there, on the reference engine,
// with the same result: the CPU backend ignores kernel names (on a GPU they select the units).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "reference/stepfun/harness.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;

ref::LayerData small_layer() {
  ref::LayerCase c;
  c.family = Family::kBF16;
  c.num_tokens = 8;
  c.hidden = 128;
  c.intermediate = 64;
  c.num_experts = 4;
  c.top_k = 2;
  return ref::make_layer(c);
}

TEST(PlanKernels, CpuPlansNameTheReferenceUnits) {
  const ref::LayerData data = small_layer();
  const StepFunMoeLaunch launch = prepare_stepfun_moe(ref::layer_args(data));
  EXPECT_EQ(launch.plan().path, "cpu");
  EXPECT_EQ(launch.plan().fc1_kernel, "cpu_fc1_bf16_t" + std::to_string(launch.plan().tile));
  EXPECT_EQ(launch.plan().fc2_kernel, "cpu_fc2_bf16_t" + std::to_string(launch.plan().tile));
}

TEST(PlanKernels, TheCpuBackendRunsAGpuPlanOnTheReferenceEngine) {
  const ref::LayerData data = small_layer();
  const std::vector<Tensor> want = stepfun_moe(ref::layer_args(data));
  MoeArgs args = ref::layer_args(data);
  Plan plan = prepare_stepfun_moe(args).plan();
  plan.path = "sm90";
  plan.fc1_kernel = "sm90_fc1_bf16_t" + std::to_string(plan.tile);
  plan.fc2_kernel = "sm90_fc2_bf16_t" + std::to_string(plan.tile);
  args.plan = plan;
  const std::vector<Tensor> got = stepfun_moe(args);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got[0].nbytes(), want[0].nbytes());
  EXPECT_EQ(std::memcmp(got[0].data(), want[0].data(), got[0].nbytes()), 0);
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
