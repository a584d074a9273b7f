// The fp64 oracle (spec §10.1) against a direct formula, its c_gs calibration, and the whole
// reference pipeline against it for every family within the §10.2 tolerances plus a relative
// Frobenius bound.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "reference/stepfun/stepfun_gemm_testing.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using testing::Case;
using testing::Dims;
using testing::kAllFamilies;
using testing::name;

TEST(StepfunOracle, Bf16MatchesTheLayerFormulaOnLogicalWeights) {
  Dims d;
  d.tokens = 3, d.hidden = 64, d.inter = 64, d.experts = 3, d.top_k = 2;
  d.limits = {7.0f, 16.0f, 5.0f};
  const Case c = testing::make_case(Family::kBF16, d);
  const OracleResult r = oracle_moe(c.oracle_problem());
  // Straight from spec §3.1 / §7.2 on the logical bf16 weights (no physical layout involved).
  const std::vector<float> x = testing::floats_of(c.hidden), w1 = testing::floats_of(c.w1);
  const std::vector<float> w2 = testing::floats_of(c.w2);
  const int64_t h = d.hidden, inter = d.inter;
  std::vector<double> want(static_cast<size_t>(d.tokens * h), 0.0);
  for (int64_t t = 0; t < d.tokens; ++t) {
    for (int64_t k = 0; k < d.top_k; ++k) {
      const int64_t e = c.ids[t * d.top_k + k];
      const double limit = d.limits[e];
      std::vector<double> act(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        double up = 0.0, gate = 0.0;
        for (int64_t j = 0; j < h; ++j) {
          up += double(x[t * h + j]) * w1[(e * 2 * inter + i) * h + j];
          gate += double(x[t * h + j]) * w1[(e * 2 * inter + inter + i) * h + j];
        }
        const double silu = gate / (1.0 + std::exp(-gate));
        act[i] = formats::bf16_to_float(formats::bf16_from_float(
            float(std::min(silu, limit) * std::min(std::max(up, -limit), limit))));
      }
      for (int64_t j = 0; j < h; ++j) {
        double y = 0.0;
        for (int64_t i = 0; i < inter; ++i) y += act[i] * w2[(e * h + j) * inter + i];
        want[t * h + j] += double(c.topk_weights[t * d.top_k + k]) * y;
      }
    }
  }
  EXPECT_LT(testbed::relative_frobenius(r.output, want), 1e-9);
}

TEST(StepfunOracle, CalibrationAndLocality) {
  Dims d;
  d.tokens = 8, d.hidden = 128, d.inter = 64, d.experts = 4, d.top_k = 2;
  for (Family f : kAllFamilies) {
    Case c = testing::make_case(f, d, false);
    const OracleResult r = oracle_moe(c.oracle_problem());
    double amax = 0.0;
    for (double v : r.activation) amax = std::max(amax, std::fabs(v));
    EXPECT_LE(amax, 16.0 * 16.0) << "|SwiGLUStep| <= L^2";
    const double c_gs = calibrate_intermediate_scale(c.oracle_problem());
    const double want = f == Family::kNVFP4 ? 2688.0 / amax
                        : f == Family::kFP8 ? 448.0 / amax
                                            : 0.0;
    EXPECT_DOUBLE_EQ(c_gs, want) << name(f);
  }
  // Locality: ids are global, local expert = id - offset; other pairs contribute nothing.
  Case c = testing::make_case(Family::kBF16, d, false);
  const OracleResult base = oracle_moe(c.oracle_problem());
  OracleProblem p = c.oracle_problem();
  std::vector<int32_t> ids(c.ids);
  for (int32_t& id : ids) id += 3;
  p.topk_ids = ids.data();
  p.local_expert_offset = 3;
  EXPECT_EQ(oracle_moe(p).output, base.output) << "offset shifts ids and experts together";
  std::vector<float> weights(c.topk_weights);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (c.ids[i] < 2) continue;
    ids[i] = (i % 2) ? 1 : 3 + 4;  // below / above the local range [3, 7)
    weights[i] = 0.0f;
  }
  const OracleResult dropped = oracle_moe(p);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(dropped.local[i], c.ids[i] < 2);
  OracleProblem zero_weights = c.oracle_problem();
  zero_weights.topk_weights = weights.data();
  EXPECT_LT(testbed::relative_frobenius(dropped.output, oracle_moe(zero_weights).output), 1e-12);
}

struct Bar {
  double percent, frobenius;
};

/// §10.2 percent (mxfp8: our own 0.9 bar of §12.10 instead of FlashInfer's 0.79) and the
/// relative Frobenius bound of the brief.
Bar bar(Family f) {
  switch (f) {
    case Family::kBF16:
      return {0.925, 1e-2};
    case Family::kFP8:
      return {0.92, 1e-2};
    case Family::kMXFP8:
      return {0.9, 1e-2};
    default:
      return {0.92, 2e-2};
  }
}

void expect_pipeline_matches_oracle(const Dims& d) {
  for (Family f : kAllFamilies) {
    const Case c = testing::make_case(f, d);
    const auto t0 = std::chrono::steady_clock::now();
    const testing::PipelineOut out = testing::run_pipeline(c);
    const auto t1 = std::chrono::steady_clock::now();
    const OracleResult oracle = oracle_moe(c.oracle_problem());
    const auto t2 = std::chrono::steady_clock::now();
    const double within = testbed::fraction_within(out.output, oracle.output, 0.1, 0.85);
    const double frob = testbed::relative_frobenius(out.output, oracle.output);
    std::printf(
        "  %-14s tile %3lld: within %.4f  rel-frobenius %.2e  (reference %.0f ms, "
        "oracle %.0f ms)\n",
        name(f), static_cast<long long>(d.tile), within, frob,
        std::chrono::duration<double, std::milli>(t1 - t0).count(),
        std::chrono::duration<double, std::milli>(t2 - t1).count());
    EXPECT_GE(within, bar(f).percent) << name(f);
    EXPECT_LE(frob, bar(f).frobenius) << name(f);
  }
}

TEST(StepfunOracle, ReferencePipelineWithinToleranceEveryFamily) {
  Dims d;  // H 512, I 256, E 8, K 2, T 32, tile 8, limits 7 / 16 alternating
  expect_pipeline_matches_oracle(d);
}

TEST(StepfunOracle, ReferencePipelineWithinToleranceTile128) {
  Dims d;
  d.tokens = 48, d.hidden = 256, d.inter = 128, d.experts = 2, d.top_k = 2, d.tile = 128;
  d.limits = {16.0f, 7.0f};
  expect_pipeline_matches_oracle(d);
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
