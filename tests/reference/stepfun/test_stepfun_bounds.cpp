// Regression tests of issue 25 for the StepFun reference engine: the live CTA count is checked
// against the CTA tables, precomputed ids must be distinct per token (spec §2.2), range sums cannot
// overflow and invalid families are named instead of crashing.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cakemoe/errors.h"
#include "reference/stepfun/gemm_common.h"
#include "reference/stepfun/routing.h"
#include "reference/stepfun/tables.h"
#include "reference/stepfun/weights.h"
#include "testbed/expect_error.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using testbed::expect_error;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

TEST(StepfunReferenceBounds, LiveCtaCountIsBoundedByTheTables) {
  const std::vector<int32_t> batch = {0, 1, 1};
  const std::vector<int32_t> limit = {3, 12, 20};
  GemmTables t;
  t.cta_idx_xy_to_batch_idx = batch.data();
  t.cta_idx_xy_to_mn_limit = limit.data();
  t.cta_table_entries = 3;
  t.tile = 8;
  t.num_non_exiting_ctas = 2;
  const ExpertRows rows = group_rows_by_expert(t, 2, 24);
  EXPECT_EQ(rows.rows[0].size(), 3u);
  EXPECT_EQ(rows.rows[1].size(), 4u);
  t.num_non_exiting_ctas = 3;
  EXPECT_NO_THROW(group_rows_by_expert(t, 2, 24));
  t.num_non_exiting_ctas = 4;  // one entry past the tables: used to be read
  expect_error([&] { group_rows_by_expert(t, 2, 24); }, "num_non_exiting_ctas");
  t.num_non_exiting_ctas = std::numeric_limits<int32_t>::max();
  expect_error([&] { group_rows_by_expert(t, 2, 24); }, "num_non_exiting_ctas");
}

TEST(StepfunReferenceBounds, PrecomputedIdsAreDistinctPerToken) {
  const std::vector<int32_t> ok = {0, 1, 2, 3, 1, 0};  // [T=3, K=2]
  EXPECT_NO_THROW(check_distinct_topk_ids(ok.data(), 3, 2, 4));
  const std::vector<int32_t> repeated = {0, 1, 2, 2, 1, 0};
  expect_error([&] { check_distinct_topk_ids(repeated.data(), 3, 2, 4); }, "topk_ids");
  const std::vector<int32_t> far = {5, 7, 9, 5};  // [T=1, K=4]: the repeat is 3 routes apart
  expect_error([&] { check_distinct_topk_ids(far.data(), 1, 4, 16); }, "topk_ids");
  // Ids outside [0, E) go nowhere and may repeat (the EP layer masks stale rows with -1).
  const std::vector<int32_t> nowhere = {-1, -1, 3, 16, 16, 2};  // [T=2, K=3], E = 16
  EXPECT_NO_THROW(check_distinct_topk_ids(nowhere.data(), 2, 3, 16));
  const std::vector<int32_t> repeat_after_nowhere = {-1, 3, -1, 3};  // [T=1, K=4]
  expect_error([&] { check_distinct_topk_ids(repeat_after_nowhere.data(), 1, 4, 16); },
               "topk_ids");
}

TEST(StepfunReferenceBounds, RoutingRangeSumCannotOverflow) {
  RoutingConfig c;
  c.num_tokens = 4;
  c.top_k = 2;
  c.num_experts = 8;
  c.local_num_experts = 8;
  EXPECT_NO_THROW(check_routing_config(c));
  c.local_expert_offset = 1;
  c.local_num_experts = kInt64Max;
  expect_error([&] { check_routing_config(c); }, "local_num_experts");
  c.local_expert_offset = kInt64Max;
  c.local_num_experts = 1;
  expect_error([&] { check_routing_config(c); }, "local_num_experts");
  c.local_expert_offset = 0;
  c.num_tokens = int64_t{1} << 62;  // T * K used to wrap in table_sizes
  expect_error([&] { table_sizes(c); }, "num_tokens");
}

TEST(StepfunReferenceBounds, InvalidFamilyIsNamed) {
  testbed::Rng rng(11);
  const Tensor w1 = testbed::random_bf16({2, 128, 64}, rng, 0.1f);
  const Tensor w2 = testbed::random_bf16({2, 64, 64}, rng, 0.1f);
  WeightPrepOptions o;
  o.family = Family::kBF16;
  EXPECT_NO_THROW(::cakemoe::reference::stepfun::prepare_weights(w1, w2, o));
  o.family = static_cast<Family>(148);
  expect_error([&] { check_weight_inputs(w1, w2, o); }, "family");
  expect_error([&] { ::cakemoe::reference::stepfun::prepare_weights(w1, w2, o); }, "family");
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
