// MoeArgs::autotune on the GPU: a small bf16 layer picks an sm90 or simt candidate of plans_for by
// measuring it (CUDA events on the caller's stream), passes the fp64 oracle, hits the cache on
// the next prepare, and prepare refuses autotune while its stream is being captured.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/check.h"
#include "core/cuda_util.h"
#include "reference/stepfun/harness.h"
#include "stepfun/autotune.h"
#include "stepfun/gpu/stepfun_gpu_case.h"
#include "testbed/gpu/gpu_testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;
namespace gt = gpu_testbed;

ref::LayerCase small_bf16_case() {
  ref::LayerCase c;
  c.family = Family::kBF16;
  c.num_tokens = 64;
  c.hidden = 512;
  c.intermediate = 256;
  c.num_experts = 16;
  c.top_k = 4;
  c.regime = ref::RoutingRegime::kRandperm;
  return c;
}

ProblemDesc problem_for(const ref::LayerData& d) {
  ProblemDesc p;
  p.family = d.config.family;
  p.num_tokens = d.config.num_tokens;
  p.top_k = d.config.top_k;
  p.local_num_experts = d.config.num_experts;
  p.hidden_size = d.config.hidden;
  p.intermediate_size = d.config.intermediate;
  p.device = Device::cuda(0);
  return p;
}

class StreamHolder {
 public:
  StreamHolder() { core::require(cudaStreamCreate(&s) == cudaSuccess, "stream", "create"); }
  ~StreamHolder() { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

TEST(StepFunAutotuneGpu, PicksAMeasuredCandidatePassesTheOracleAndHitsTheCache) {
  CAKEMOE_REQUIRE_GPU();
  clear_autotune_cache();
  StreamHolder stream;
  const ref::LayerData d = ref::make_layer(small_bf16_case());
  const std::vector<Plan> candidates = plans_for(problem_for(d));
  ASSERT_FALSE(candidates.empty());
  gt::DevicePool pool;
  MoeArgs args = gt::device_args(ref::layer_args(d), pool);
  args.autotune = true;
  args.autotune_stream = stream.s;
  args.output = pool.filled({d.config.num_tokens, d.config.hidden}, DType::kBF16, 0xFF);

  const int64_t before = autotune::measurement_count();
  const StepFunMoeLaunch launch = prepare_stepfun_moe(args);
  const int64_t measured = autotune::measurement_count() - before;
  EXPECT_GE(measured, 1);
  EXPECT_LE(measured, static_cast<int64_t>(candidates.size()));
  EXPECT_EQ(autotune_cache_size(), 1u);
  std::ostringstream chosen;
  chosen << launch.plan();
  bool listed = false;
  for (const Plan& c : candidates) {
    listed = listed || (c.tile == launch.plan().tile && c.fc1_kernel == launch.plan().fc1_kernel &&
                        c.fc2_kernel == launch.plan().fc2_kernel);
  }
  EXPECT_TRUE(listed) << chosen.str();
  EXPECT_TRUE(launch.plan().path == "sm90" || launch.plan().path == "simt") << chosen.str();

  core::fill_bytes(args.output, 0xFF, stream.s);  // measurements wrote it: check this launch only
  launch.launch(stream.s);
  core::cuda_stream_sync(stream.s);
  const Tensor out = gt::to_host(args.output);
  const ref::LayerCheck check = ref::check_layer_output(d, out.ptr<uint16_t>());
  EXPECT_TRUE(check.pass) << chosen.str() << ": " << check.summary();

  // The same bucket again: a hit, nothing measured, the same plan.
  const int64_t after_miss = autotune::measurement_count();
  const StepFunMoeLaunch again = prepare_stepfun_moe(args);
  EXPECT_EQ(autotune::measurement_count(), after_miss);
  EXPECT_EQ(autotune_cache_size(), 1u);
  EXPECT_EQ(again.plan().fc1_kernel, launch.plan().fc1_kernel);
  EXPECT_EQ(again.plan().tile, launch.plan().tile);
  clear_autotune_cache();
}

TEST(StepFunAutotuneGpu, RefusedWhileTheStreamIsCaptured) {
  CAKEMOE_REQUIRE_GPU();
  clear_autotune_cache();
  StreamHolder stream;
  const ref::LayerData d = ref::make_layer(small_bf16_case());
  gt::DevicePool pool;
  MoeArgs args = gt::device_args(ref::layer_args(d), pool);
  args.autotune = true;
  args.autotune_stream = stream.s;
  ASSERT_EQ(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  std::string argument;
  try {
    prepare_stepfun_moe(args);
  } catch (const InvalidArgument& e) {
    argument = e.argument();
  }
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.s, &graph), cudaSuccess);  // nothing broke the capture
  cudaGraphDestroy(graph);
  EXPECT_EQ(argument, "autotune");
  EXPECT_EQ(autotune_cache_size(), 0u);
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
