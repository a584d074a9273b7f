// MoeArgs::autotune on the CPU: the fastest-candidate rule with fake timings, the cache key and
// its token bucket, and real autotuned prepares of the CPU engine (oracle check, cache hits that
// measure nothing, an explicit plan that wins, candidates that agree bitwise).
#include <gtest/gtest.h>

#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "reference/stepfun/families.h"
#include "reference/stepfun/harness.h"
#include "stepfun/autotune.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;

std::vector<Plan> fake_candidates(int count) {
  std::vector<Plan> plans(count);
  for (int i = 0; i < count; ++i) plans[i].tile = 8 << i;
  return plans;
}

/// A measure that answers from `costs` by candidate tile (negative cost: throws Unsupported).
autotune::MeasureFn fake_measure(const std::vector<double>& costs, std::vector<int>* measured) {
  return [costs, measured](const Plan& plan) {
    int index = 0;
    while ((8 << index) != plan.tile) ++index;
    measured->push_back(index);
    if (costs[index] < 0) {
      throw Unsupported("candidate" + std::to_string(index), "not served");
    }
    return costs[index];
  };
}

TEST(AutotuneChoice, PicksTheLowestCostAndMeasuresEveryCandidateOnce) {
  std::vector<int> measured;
  EXPECT_EQ(autotune::choose_fastest(fake_candidates(4), fake_measure({5, 3, 4, 9}, &measured)),
            1u);
  EXPECT_EQ(measured, (std::vector<int>{0, 1, 2, 3}));
  measured.clear();
  EXPECT_EQ(autotune::choose_fastest(fake_candidates(3), fake_measure({7, 8, 2}, &measured)), 2u);
}

TEST(AutotuneChoice, TiesGoToTheEarlierCandidate) {
  std::vector<int> measured;
  EXPECT_EQ(autotune::choose_fastest(fake_candidates(4), fake_measure({6, 2, 2, 2}, &measured)),
            1u);
  EXPECT_EQ(autotune::choose_fastest(fake_candidates(2), fake_measure({1, 1}, &measured)), 0u);
}

TEST(AutotuneChoice, SkipsUnsupportedCandidates) {
  std::vector<int> measured;
  EXPECT_EQ(autotune::choose_fastest(fake_candidates(4), fake_measure({-1, 5, -1, 4}, &measured)),
            3u);
  EXPECT_EQ(measured.size(), 4u);
}

TEST(AutotuneChoice, AllUnsupportedRethrowsTheFirstError) {
  std::vector<int> measured;
  try {
    autotune::choose_fastest(fake_candidates(3), fake_measure({-1, -1, -1}, &measured));
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_EQ(e.argument(), "candidate0");
  }
  EXPECT_EQ(measured.size(), 3u);
}

TEST(AutotuneChoice, OtherErrorsPropagateAtOnceAndEmptyIsInvalid) {
  int calls = 0;
  const autotune::MeasureFn bad = [&calls](const Plan&) -> double {
    ++calls;
    throw InvalidArgument("hidden_states", "bad");
  };
  EXPECT_THROW(autotune::choose_fastest(fake_candidates(3), bad), InvalidArgument);
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(autotune::choose_fastest({}, bad), InvalidArgument);
}

TEST(AutotuneKey, TokensBucketToTheNextPowerOfTwo) {
  EXPECT_EQ(autotune::token_bucket(1), 1);
  EXPECT_EQ(autotune::token_bucket(2), 2);
  EXPECT_EQ(autotune::token_bucket(3), 4);
  EXPECT_EQ(autotune::token_bucket(64), 64);
  EXPECT_EQ(autotune::token_bucket(65), 128);
  EXPECT_EQ(autotune::token_bucket(kMaxNumTokens), kMaxNumTokens);
  EXPECT_THROW(autotune::token_bucket(0), InvalidArgument);
  EXPECT_THROW(autotune::token_bucket(kMaxNumTokens + 1), InvalidArgument);
}

ProblemDesc problem_of(int64_t num_tokens) {
  ProblemDesc p;
  p.family = Family::kBF16;
  p.num_tokens = num_tokens;
  p.top_k = 8;
  p.local_num_experts = 64;
  p.hidden_size = 4096;
  p.intermediate_size = 1536;
  p.device = Device::cuda(0);
  return p;
}

TEST(AutotuneKey, SameBucketSameKeyAndEveryFieldCounts) {
  const autotune::CacheKey base = autotune::make_key(problem_of(33), 90, 132);
  EXPECT_EQ(base.token_bucket, 64);
  EXPECT_TRUE(base == autotune::make_key(problem_of(64), 90, 132));
  EXPECT_FALSE(base == autotune::make_key(problem_of(65), 90, 132));
  EXPECT_FALSE(base == autotune::make_key(problem_of(32), 90, 132));
  EXPECT_FALSE(base == autotune::make_key(problem_of(33), 90, 114));  // another GPU
  EXPECT_FALSE(base == autotune::make_key(problem_of(33), 100, 132));
  std::vector<ProblemDesc> others(7, problem_of(33));
  others[0].family = Family::kFP8;
  others[1].top_k = 4;
  others[2].local_num_experts = 32;
  others[3].hidden_size = 2048;
  others[4].intermediate_size = 1280;
  others[5].logits_input = false;
  others[6].device = Device::cuda(1);
  for (const ProblemDesc& p : others) {
    const autotune::CacheKey key = autotune::make_key(p, 90, 132);
    EXPECT_FALSE(base == key);
    EXPECT_TRUE(base < key || key < base);
  }
  const autotune::CacheKey cpu = autotune::key_for([] {
    ProblemDesc p = problem_of(33);
    p.device = Device::cpu();
    return p;
  }());
  EXPECT_EQ(cpu.capability, 0);
  EXPECT_EQ(cpu.sm_count, 0);
}

ref::LayerCase small_case(Family f, int64_t num_tokens) {
  ref::LayerCase c;
  c.family = f;
  c.num_tokens = num_tokens;
  c.hidden = 256;
  c.intermediate = 128;
  c.num_experts = 8;
  c.top_k = 2;
  return c;
}

ProblemDesc problem_for(const ref::LayerData& data) {
  ProblemDesc p;
  p.family = data.config.family;
  p.num_tokens = data.config.num_tokens;
  p.top_k = data.config.top_k;
  p.local_num_experts = data.config.num_experts;
  p.hidden_size = data.config.hidden;
  p.intermediate_size = data.config.intermediate;
  p.logits_input = !data.config.precomputed;
  return p;
}

bool same_plan(const Plan& a, const Plan& b) {
  return a.tile == b.tile && a.fc1_kernel == b.fc1_kernel && a.fc2_kernel == b.fc2_kernel &&
         a.path == b.path;
}

bool in_candidates(const Plan& plan, const std::vector<Plan>& candidates) {
  for (const Plan& c : candidates) {
    if (same_plan(plan, c)) return true;
  }
  return false;
}

/// Prepares with autotune on, runs into a poisoned output and checks it against the oracle.
Plan autotune_and_check(const ref::LayerData& data) {
  MoeArgs args = ref::layer_args(data);
  args.autotune = true;
  Tensor output = Tensor::empty({data.config.num_tokens, data.config.hidden}, DType::kBF16);
  args.output = output;
  const StepFunMoeLaunch launch = prepare_stepfun_moe(args);
  testbed::poison(output);  // autotune's measurements wrote it: only the launch below counts
  launch.launch();
  const ref::LayerCheck check = ref::check_layer_output(data, output.ptr<uint16_t>());
  EXPECT_TRUE(check.pass) << data.config.describe() << ": " << check.summary();
  return launch.plan();
}

TEST(AutotuneLayer, PicksACandidatePassesTheOracleAndCachesPerBucket) {
  clear_autotune_cache();
  for (Family f : kAllFamilies) {
    SCOPED_TRACE(family_name(f));
    const ref::LayerData data = ref::make_layer(small_case(f, 24));
    const std::vector<Plan> candidates = plans_for(problem_for(data));
    ASSERT_GE(candidates.size(), 2u);
    const size_t cached = autotune_cache_size();
    const int64_t before = autotune::measurement_count();
    const Plan chosen = autotune_and_check(data);
    EXPECT_TRUE(in_candidates(chosen, candidates)) << chosen;
    EXPECT_EQ(autotune::measurement_count() - before, static_cast<int64_t>(candidates.size()));
    EXPECT_EQ(autotune_cache_size(), cached + 1);

    // T = 20 shares T = 24's bucket (32): a hit, nothing measured, the same plan.
    const ref::LayerData same_bucket = ref::make_layer(small_case(f, 20));
    const int64_t after_miss = autotune::measurement_count();
    EXPECT_TRUE(same_plan(autotune_and_check(same_bucket), chosen));
    EXPECT_EQ(autotune::measurement_count(), after_miss);
    EXPECT_EQ(autotune_cache_size(), cached + 1);
  }
  // T = 40 is another bucket: measured again.
  const int64_t before = autotune::measurement_count();
  autotune_and_check(ref::make_layer(small_case(Family::kBF16, 40)));
  EXPECT_GT(autotune::measurement_count(), before);
  EXPECT_EQ(autotune_cache_size(), std::size(kAllFamilies) + 1);
  clear_autotune_cache();
  EXPECT_EQ(autotune_cache_size(), 0u);
}

TEST(AutotuneLayer, AnExplicitPlanWinsAndMeasuresNothing) {
  clear_autotune_cache();
  const ref::LayerData data = ref::make_layer(small_case(Family::kNVFP4, 24));
  const std::vector<Plan> candidates = plans_for(problem_for(data));
  MoeArgs args = ref::layer_args(data);
  args.autotune = true;
  args.plan = candidates.back();
  const int64_t before = autotune::measurement_count();
  const StepFunMoeLaunch launch = prepare_stepfun_moe(args);
  EXPECT_TRUE(same_plan(launch.plan(), candidates.back()));
  EXPECT_EQ(autotune::measurement_count(), before);
  EXPECT_EQ(autotune_cache_size(), 0u);
}

TEST(AutotuneLayer, RejectsRepsOutOfRangeBeforeMeasuring) {
  clear_autotune_cache();
  const ref::LayerData data = ref::make_layer(small_case(Family::kBF16, 24));
  MoeArgs args = ref::layer_args(data);
  args.autotune = true;
  const int64_t before = autotune::measurement_count();
  for (int reps : {0, -1, 1001}) {
    args.autotune_reps = reps;
    try {
      prepare_stepfun_moe(args);
      FAIL() << "expected InvalidArgument for autotune_reps = " << reps;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "autotune_reps");
    }
  }
  EXPECT_EQ(autotune::measurement_count(), before);
  EXPECT_EQ(autotune_cache_size(), 0u);
}

// What MoeArgs::autotune documents for the CPU engine: the candidates' outputs agree bitwise.
TEST(AutotuneLayer, CpuCandidatesAgreeBitwise) {
  for (Family f : kAllFamilies) {
    SCOPED_TRACE(family_name(f));
    const ref::LayerData data = ref::make_layer(small_case(f, 64));
    const std::vector<Plan> candidates = plans_for(problem_for(data));
    ASSERT_GE(candidates.size(), 3u);
    std::vector<Tensor> outputs;
    for (const Plan& plan : candidates) {
      MoeArgs args = ref::layer_args(data);
      args.plan = plan;
      outputs.push_back(stepfun_moe(args)[0]);
    }
    for (size_t i = 1; i < outputs.size(); ++i) {
      EXPECT_EQ(std::memcmp(outputs[i].data(), outputs[0].data(), outputs[0].nbytes()), 0)
          << "tile " << candidates[i].tile << " vs " << candidates[0].tile;
    }
  }
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
