// The StepFun layer on the GPU through the public API (spec §10.3): every case compares the
// routing tables of the do_finalize=false outputs bitwise with the CPU reference router at the
// same tile (all T tokens), and the finalized output with the fp64 oracle (check_layer_output:
// §10.2 + Frobenius) on up to 64 (full) or 32 (default) evenly spaced tokens
// (stepfun_gpu_matrix.h says why and how). CAKEMOE_GPU_MATRIX=full runs the whole matrix
// (5 families x 3 limits x 3 regimes x T {8, 64, 512, 2048}, Step-3.5 for every family); the
// default runs one (limits, regime) per family at T {8, 512}, every limit and regime appearing at
// least once, and Step-3.5 nvfp4 at T {1, 16, 256}.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "testbed/gpu/gpu_testbed.h"
#include "stepfun/gpu/stepfun_gpu_case.h"
#include "stepfun/gpu/stepfun_gpu_matrix.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;
namespace gt = gpu_testbed;

const ref::LimitMode kLimits[] = {ref::LimitMode::k7, ref::LimitMode::k16, ref::LimitMode::kMixed};
const ref::RoutingRegime kRegimes[] = {ref::RoutingRegime::kUniform, ref::RoutingRegime::kRagged,
                                       ref::RoutingRegime::kRandperm};

/// Oracle tokens per case: the fp64 oracle dominates the host time (stepfun-api.md).
int64_t max_checked() { return gt::stepfun_full_matrix() ? 64 : 32; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// One case on the device: tables vs the CPU router (all tokens), output vs the oracle.
void check_case(const gt::MatrixCase& c, const gt::MatrixWeights& w) {
  const int64_t tokens = c.host.hidden_states.shape[0];
  ref::LayerCase shown = c.check.config;
  shown.num_tokens = tokens;
  std::ostringstream label;
  label << shown.describe() << " (oracle on " << c.checked.size() << " tokens)";
  const std::string what = label.str();
  SCOPED_TRACE(what);
  gt::DevicePool pool;
  MoeArgs dev = gt::device_case_args(c, w, pool);

  // do_finalize = false: [gemm2_output, expert_weights, expanded_idx_to_permuted_idx].
  dev.do_finalize = false;
  const StepFunMoeLaunch partial = prepare_stepfun_moe(dev);
  partial.launch();
  core::cuda_stream_sync(nullptr);
  const int64_t tile = partial.plan().tile;
  const gt::HostTables cpu = gt::cpu_routing(c.host, tile);
  const std::vector<TensorView> outs = partial.outputs();
  ASSERT_EQ(outs.size(), 3u);
  const TensorView cpu_weights =
      c.host.routing_logits.defined() ? cpu.topk_weights.view() : c.host.topk_weights;
  EXPECT_EQ(gt::diff_device_host(outs[1], cpu_weights), "")
      << "expert_weights vs CPU router (tile " << tile << ")";
  EXPECT_EQ(gt::diff_device_host(outs[2], cpu.expanded_idx_to_permuted_idx), "")
      << "expanded_idx_to_permuted_idx vs CPU router (tile " << tile << ")";

  // The finalized layer into a poisoned output; the checked rows against the oracle.
  dev.do_finalize = true;
  dev.output = pool.filled({tokens, w.shape.hidden}, DType::kBF16, 0xFF);
  const StepFunMoeLaunch full = prepare_stepfun_moe(dev);
  full.launch();
  core::cuda_stream_sync(nullptr);
  const Tensor rows = gt::gather_rows(gt::to_host(dev.output), c.checked);
  const ref::LayerCheck check = ref::check_layer_output(c.check, rows.ptr<uint16_t>());
  std::ostringstream plan;
  plan << full.plan();
  EXPECT_TRUE(check.pass) << what << " plan " << plan.str() << ": " << check.summary();
  std::printf("[ case ] %s tile=%lld %s\n", what.c_str(), static_cast<long long>(tile),
              check.summary().c_str());
}

/// Prepares the weights once and runs every (regime, T) on them.
void run_cases(const ref::LayerCase& shape, const std::vector<ref::RoutingRegime>& regimes,
               const std::vector<int64_t>& tokens, bool precomputed) {
  auto t0 = std::chrono::steady_clock::now();
  const std::unique_ptr<gt::MatrixWeights> w = gt::make_matrix_weights(shape);
  std::printf("[ host ] weights %s: %.1f s\n", shape.describe().c_str(), seconds_since(t0));
  for (ref::RoutingRegime regime : regimes) {
    for (int64_t t : tokens) {
      t0 = std::chrono::steady_clock::now();
      const gt::MatrixCase c = gt::make_matrix_case(*w, regime, t, precomputed, max_checked());
      std::printf("[ host ] case %s T=%lld: %.1f s\n", ref::routing_regime_name(regime),
                  static_cast<long long>(t), seconds_since(t0));
      check_case(c, *w);
    }
  }
}

using MatrixParam = std::tuple<Family, ref::LimitMode>;

int family_index(Family f) {
  int i = 0;
  while (kAllFamilies[i] != f) ++i;
  return i;
}

/// The default subset: family i takes limits i % 3 (and regime (i + i / 3) % 3 in the test), so
/// the five cases cover all three limits and all three regimes.
bool in_small_matrix(const MatrixParam& p) {
  return std::get<1>(p) == kLimits[family_index(std::get<0>(p)) % 3];
}

class StepFunLayerMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(StepFunLayerMatrix, TablesBitwiseAndOutputWithinTolerance) {
  CAKEMOE_REQUIRE_GPU();
  const bool full = gt::stepfun_full_matrix();
  if (!full && !in_small_matrix(GetParam())) {
    GTEST_SKIP() << "not in the default matrix; set CAKEMOE_GPU_MATRIX=full";
  }
  ref::LayerCase shape;
  shape.family = std::get<0>(GetParam());
  shape.limits = std::get<1>(GetParam());
  shape.hidden = 4096;
  shape.intermediate = 1536;
  shape.num_experts = 64;
  shape.top_k = 8;
  const int i = family_index(shape.family);
  const std::vector<ref::RoutingRegime> regimes =
      full ? std::vector<ref::RoutingRegime>(std::begin(kRegimes), std::end(kRegimes))
           : std::vector<ref::RoutingRegime>{kRegimes[(i + i / 3) % 3]};
  run_cases(shape, regimes,
            full ? std::vector<int64_t>{8, 64, 512, 2048} : std::vector<int64_t>{8, 512},
            false);
}

INSTANTIATE_TEST_SUITE_P(
    Spec103, StepFunLayerMatrix,
    ::testing::Combine(::testing::ValuesIn(kAllFamilies), ::testing::ValuesIn(kLimits)),
    [](const ::testing::TestParamInfo<MatrixParam>& info) {
      return std::string(family_name(std::get<0>(info.param))) + "_limits" +
             ref::limit_mode_name(std::get<1>(info.param));
    });

class StepFun35Layer : public ::testing::TestWithParam<Family> {};

// Step-3.5-Flash routed experts (spec §11): H 4096, I 1280, E 288, K 8, precomputed fp32 weights.
TEST_P(StepFun35Layer, PrecomputedRoutingE288) {
  CAKEMOE_REQUIRE_GPU();
  const bool full = gt::stepfun_full_matrix();
  if (!full && GetParam() != Family::kNVFP4) {
    GTEST_SKIP() << "default runs nvfp4 only; set CAKEMOE_GPU_MATRIX=full";
  }
  ref::LayerCase shape;
  shape.family = GetParam();
  shape.hidden = 4096;
  shape.intermediate = 1280;
  shape.num_experts = 288;
  shape.top_k = 8;
  shape.limits = ref::LimitMode::k7;
  shape.precomputed = true;
  shape.precomputed_fp32 = true;
  run_cases(shape, {ref::RoutingRegime::kUniform},
            full ? std::vector<int64_t>{1, 16, 256, 2048} : std::vector<int64_t>{1, 16, 256}, true);
}

INSTANTIATE_TEST_SUITE_P(Step35, StepFun35Layer, ::testing::ValuesIn(kAllFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
