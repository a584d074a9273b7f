// A plan's unit names are what prepare_stepfun_moe runs: on the CPU backend the plan names the
// reference units (path "cpu"), and a name no unit of the stage answers to is rejected, naming
// the `kernel` argument of the stage.
#include <gtest/gtest.h>

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

TEST(PlanKernels, AUnitTheDeviceDoesNotRunIsRejected) {
  const ref::LayerData data = small_layer();
  for (const char* stage : {"fc1", "fc2"}) {
    MoeArgs args = ref::layer_args(data);
    Plan plan = prepare_stepfun_moe(args).plan();
    (std::string(stage) == "fc1" ? plan.fc1_kernel : plan.fc2_kernel) =
        std::string("sm90_") + stage + "_bf16_t" + std::to_string(plan.tile);
    args.plan = plan;
    try {
      prepare_stepfun_moe(args);
      ADD_FAILURE() << stage << ": a CUDA unit on the CPU backend was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "kernel") << e.what();
    }
  }
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
