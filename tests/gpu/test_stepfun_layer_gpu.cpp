// The StepFun layer on the GPU through the public API (spec §10.3): every case compares the
// routing tables of the do_finalize=false outputs bitwise with the CPU reference router at the
// same tile, and the finalized output with the fp64 oracle (check_layer_output: §10.2 + Frobenius).
// CAKEMOE_GPU_MATRIX=full runs the whole matrix (5 families x 3 limits x 3 regimes x
// T {8, 64, 512, 2048}; host oracle ~30 s per case on 16 cores); the default runs one
// (limits, regime) per family at T {8, 64, 512}, every limit and regime appearing once or more.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "gpu/gpu_testbed.h"
#include "gpu/stepfun_gpu_case.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;
namespace gt = gpu_testbed;

const Family kFamilies[] = {Family::kBF16, Family::kFP8, Family::kMXFP8, Family::kNVFP4,
                            Family::kNVFP4BF16Tok};
const ref::LimitMode kLimits[] = {ref::LimitMode::k7, ref::LimitMode::k16, ref::LimitMode::kMixed};
const ref::RoutingRegime kRegimes[] = {ref::RoutingRegime::kUniform, ref::RoutingRegime::kRagged,
                                       ref::RoutingRegime::kRandperm};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Runs one T of a case on the device: tables vs the CPU router, output vs the oracle.
void check_case(const ref::LayerData& d, const MoeArgs& device_weights) {
  const std::string what = d.config.describe();
  SCOPED_TRACE(what);
  const MoeArgs host = ref::layer_args(d);
  gt::DevicePool pool;
  MoeArgs dev = gt::device_args_with_weights(host, device_weights, pool);

  // do_finalize = false: [gemm2_output, expert_weights, expanded_idx_to_permuted_idx].
  dev.do_finalize = false;
  const StepFunMoeLaunch partial = prepare_stepfun_moe(dev);
  partial.launch();
  core::cuda_stream_sync(nullptr);
  const int64_t tile = partial.plan().tile;
  const gt::HostTables cpu = gt::cpu_routing(host, tile);
  const std::vector<TensorView> outs = partial.outputs();
  ASSERT_EQ(outs.size(), 3u);
  const TensorView cpu_weights = host.routing_logits.defined() ? cpu.topk_weights.view()
                                                                : host.topk_weights;
  const std::string w_diff = gt::diff_device_host(outs[1], cpu_weights);
  EXPECT_EQ(w_diff, "") << "expert_weights vs CPU router (tile " << tile << ")";
  const std::string e2p_diff = gt::diff_device_host(outs[2], cpu.expanded_idx_to_permuted_idx);
  EXPECT_EQ(e2p_diff, "") << "expanded_idx_to_permuted_idx vs CPU router (tile " << tile << ")";

  // The finalized layer into a poisoned output.
  dev.do_finalize = true;
  dev.output = pool.filled({d.config.num_tokens, d.config.hidden}, DType::kBF16, 0xFF);
  const StepFunMoeLaunch full = prepare_stepfun_moe(dev);
  full.launch();
  core::cuda_stream_sync(nullptr);
  const Tensor output = gt::to_host(dev.output);
  const ref::LayerCheck check = ref::check_layer_output(d, output.ptr<uint16_t>());
  std::ostringstream plan;
  plan << full.plan();
  EXPECT_TRUE(check.pass) << what << " plan " << plan.str() << ": " << check.summary();
  std::printf("[ case ] %s tile=%lld %s\n", what.c_str(), static_cast<long long>(tile),
              check.summary().c_str());
}

/// Builds the case once at the largest T and checks every T of `tokens` on token subsets.
void run_tokens(ref::LayerCase c, const std::vector<int64_t>& tokens) {
  c.num_tokens = tokens.back();
  const auto t0 = std::chrono::steady_clock::now();
  const ref::LayerData full = ref::make_layer(c);
  std::printf("[ host ] make_layer %s: %.1f s\n", c.describe().c_str(), seconds_since(t0));
  gt::DevicePool weights_pool;
  const MoeArgs weights = gt::device_args(ref::layer_args(full), weights_pool);
  for (int64_t t : tokens) check_case(gt::sub_layer(full, t), weights);
}

using MatrixParam = std::tuple<Family, ref::LimitMode, ref::RoutingRegime>;

/// The default subset: family i takes limits i % 3 and regime (i + i / 3) % 3, so the five cases
/// cover all three limits and all three regimes.
bool in_small_matrix(const MatrixParam& p) {
  int family = 0;
  while (kFamilies[family] != std::get<0>(p)) ++family;
  return std::get<1>(p) == kLimits[family % 3] && std::get<2>(p) == kRegimes[(family + family / 3) % 3];
}

class StepFunLayerMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(StepFunLayerMatrix, TablesBitwiseAndOutputWithinTolerance) {
  CAKEMOE_REQUIRE_GPU();
  const bool full = gt::stepfun_full_matrix();
  if (!full && !in_small_matrix(GetParam())) {
    GTEST_SKIP() << "not in the default matrix; set CAKEMOE_GPU_MATRIX=full";
  }
  ref::LayerCase c;
  c.family = std::get<0>(GetParam());
  c.limits = std::get<1>(GetParam());
  c.regime = std::get<2>(GetParam());
  c.hidden = 4096;
  c.intermediate = 1536;
  c.num_experts = 64;
  c.top_k = 8;
  run_tokens(c, full ? std::vector<int64_t>{8, 64, 512, 2048} : std::vector<int64_t>{8, 64, 512});
}

INSTANTIATE_TEST_SUITE_P(
    Spec103, StepFunLayerMatrix,
    ::testing::Combine(::testing::ValuesIn(kFamilies), ::testing::ValuesIn(kLimits),
                       ::testing::ValuesIn(kRegimes)),
    [](const ::testing::TestParamInfo<MatrixParam>& info) {
      return std::string(family_name(std::get<0>(info.param))) + "_limits" +
             ref::limit_mode_name(std::get<1>(info.param)) + "_" +
             ref::routing_regime_name(std::get<2>(info.param));
    });

class StepFun35Layer : public ::testing::TestWithParam<Family> {};

// Step-3.5-Flash routed experts (spec §11): H 4096, I 1280, E 288, K 8, precomputed fp32 weights.
TEST_P(StepFun35Layer, PrecomputedRoutingE288) {
  CAKEMOE_REQUIRE_GPU();
  const bool full = gt::stepfun_full_matrix();
  if (!full && GetParam() != Family::kNVFP4) {
    GTEST_SKIP() << "default runs nvfp4 only; set CAKEMOE_GPU_MATRIX=full";
  }
  ref::LayerCase c;
  c.family = GetParam();
  c.hidden = 4096;
  c.intermediate = 1280;
  c.num_experts = 288;
  c.top_k = 8;
  c.limits = ref::LimitMode::k7;
  c.precomputed = true;
  c.precomputed_fp32 = true;
  run_tokens(c, full ? std::vector<int64_t>{1, 16, 256, 2048} : std::vector<int64_t>{1, 16, 256});
}

INSTANTIATE_TEST_SUITE_P(Step35, StepFun35Layer, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
