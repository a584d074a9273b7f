// Regression tests of issue 25 for prepare_bgmv_moe and the BGMV planners: hostile sizes, null
// data, the int32 kernel limits (on every path, before index data is read), a wrong num_experts
// named as such, and overflow-checked workspace sizes.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "bgmv/plan.h"
#include "bgmv/validate.h"
#include "cakemoe/bgmv.h"
#include "cakemoe/errors.h"
#include "testbed/expect_error.h"

namespace cakemoe {
namespace bgmv {
namespace {

using bgmv_test::Case;
using bgmv_test::CaseSpec;
using bgmv_test::make_case;
using testbed::expect_error;

struct Args {
  TensorView x, sorted, experts, lora, weights;
  std::vector<TensorView> a, b;
  int64_t num_experts = 0;
  BgmvOptions options;

  explicit Args(Case& c)
      : x(c.x_view()),
        sorted(c.sorted_view()),
        experts(c.experts_view()),
        lora(c.lora_view()),
        weights(c.weights_view()),
        a(c.a_views()),
        b(c.b_views()),
        num_experts(c.spec.experts) {}
  BgmvPlan prepare() const {
    return prepare_bgmv_moe(x, a, b, sorted, experts, lora, weights, num_experts, options);
  }
};

Case small_case(int64_t rank = 16, int64_t hidden = 64) {
  CaseSpec spec;
  spec.tokens = 4;
  spec.hidden = hidden;
  spec.rank = rank;
  return make_case(spec);
}

TEST(BgmvBounds, WrongNumExpertsIsBlamedOnNumExperts) {
  Case c = small_case();
  Args ok(c);
  EXPECT_NO_THROW(ok.prepare());
  Args bad(c);
  bad.num_experts = 4;  // every LoRA tensor has 8: used to be blamed on lora_a_weights[0]
  expect_error([&] { bad.prepare(); }, "num_experts");
  bad.num_experts = int64_t{1} << 40;
  expect_error([&] { bad.prepare(); }, "num_experts");
  // One tensor disagreeing with the others (and num_experts) is that tensor.
  Args odd(c);
  const TensorView b0 = odd.b[0];
  odd.b[0] = TensorView(b0.data, b0.dtype, {b0.shape[0], 4, b0.shape[2], b0.shape[3]});
  expect_error([&] { odd.prepare(); }, "lora_b_weights[0]");
}

TEST(BgmvBounds, NullDataIsRejectedBeforeItIsRead) {
  Case c = small_case();
  for (int which = 0; which < 5; ++which) {
    Args bad(c);
    TensorView* views[] = {&bad.x, &bad.sorted, &bad.experts, &bad.lora, &bad.weights};
    const char* names[] = {"x", "sorted_token_ids", "expert_ids", "lora_indices", "topk_weights"};
    views[which]->data = nullptr;
    expect_error([&] { bad.prepare(); }, names[which]);
  }
  Args bad(c);
  bad.a[0].data = nullptr;
  expect_error([&] { bad.prepare(); }, "lora_a_weights[0]");
}

TEST(BgmvBounds, NoLorasWithAHugeFeatOut) {
  // L = 0 lets LoRA-B be empty whatever F is; the default y_accum [T, S*F] used to wrap.
  Case c = small_case();
  Args args(c);
  std::vector<int64_t> no_lora(c.spec.tokens, -1);
  args.lora = TensorView(no_lora.data(), DType::kInt64, {c.spec.tokens});
  const int64_t e = c.spec.experts, r = c.spec.rank, h = c.spec.hidden;
  args.a = {TensorView(nullptr, c.spec.dtype, {0, e, r, h})};
  for (int64_t f : {int64_t{1} << 62, int64_t{1} << 40, kMaxFeatOut + 1}) {
    TensorView b(nullptr, c.spec.dtype, {0, e, 1, r});  // the constructor refuses such strides
    b.shape[2] = f;
    args.b = {b};
    expect_error([&] { args.prepare(); }, "lora_b_weights[0]");
  }
  // Within the bound, but T * F past the int32 indexing of the kernels.
  std::vector<uint16_t> x(4096 * h);
  std::vector<int64_t> no_lora_4096(4096, -1);
  args.x = TensorView(x.data(), c.spec.dtype, {4096, h});
  args.lora = TensorView(no_lora_4096.data(), DType::kInt64, {4096});
  args.b = {TensorView(nullptr, c.spec.dtype, {0, e, kMaxFeatOut, r})};
  expect_error([&] { args.prepare(); }, "lora_b_weights");
  args.b = {TensorView(nullptr, c.spec.dtype, {0, e, h, r})};
  EXPECT_NO_THROW(args.prepare());
}

TEST(BgmvBounds, Int32LimitsHoldOnEveryPathBeforeIndexData) {
  // Rank 128 is outside the Cake set: the CPU plan takes the portable semantics, where the
  // y_accum span used to go unchecked (and the index data was read first everywhere).
  Case c = small_case(128);
  Args ok(c);
  EXPECT_EQ(ok.prepare().variant(), "portable");
  std::vector<float> y(64);
  Args bad(c);
  bad.options.y_accum =
      TensorView(y.data(), DType::kFP32, {c.spec.tokens, c.feat_out()}, {int64_t{1} << 31, 1});
  expect_error([&] { bad.prepare(); }, "y_accum");
  c.expert_ids[0] = 1000;  // an index rule is broken too: the size rule is checked first
  expect_error([&] { bad.prepare(); }, "y_accum");
  Args ranges(c);
  expect_error([&] { ranges.prepare(); }, "expert_ids");
}

TEST(BgmvBounds, DimensionBoundsAreNamed) {
  Case c = small_case();
  Args bad(c);
  const TensorView a0 = bad.a[0], b0 = bad.b[0];
  // Rank above kMaxRank (the CPU engine's butterfly takes at most 64 rank groups).
  bad.a[0] = TensorView(a0.data, a0.dtype, {a0.shape[0], a0.shape[1], kMaxRank + 8, a0.shape[3]});
  bad.b[0] = TensorView(b0.data, b0.dtype, {b0.shape[0], b0.shape[1], b0.shape[2], kMaxRank + 8});
  expect_error([&] { bad.prepare(); }, "lora_a_weights[0]");
  Args slices(c);
  for (int i = 0; i < kMaxNumSlices; ++i) {
    slices.a.push_back(slices.a[0]);
    slices.b.push_back(slices.b[0]);
  }
  expect_error([&] { slices.prepare(); }, "lora_a_weights");
}

TEST(BgmvBounds, PortableLimitsAreSharedValidation) {
  ProblemShape s;
  s.num_slices = 8;
  s.rank = 128;
  EXPECT_NO_THROW(validate_portable_limits(s));
  s.num_slices = 9;
  expect_error([&] { validate_portable_limits(s); }, "lora_a_weights", true);
  s.num_slices = 1;
  s.rank = 136;
  expect_error([&] { validate_portable_limits(s); }, "lora_a_weights", true);
}

TEST(BgmvBounds, PlannerSizesAreChecked) {
  expect_error([] { route_index_layout(int64_t{1} << 62); }, "num_tokens");
  expect_error([] { grouped_workspace(int64_t{1} << 40, 8, 2, 8, 2048); }, "num_pairs");
  expect_error([] { grouped_workspace(64, 8, int64_t{1} << 40, int64_t{1} << 40, 2048); },
               "num_loras");
  expect_error([] { select_grouped(1 << 20, 8, int64_t{1} << 40, int64_t{1} << 40, 2048, 32); },
               "num_loras");
  ProblemDesc p;
  p.num_tokens = 4;
  p.num_pairs = 8;
  p.hidden = 2048;
  p.rank = 16;
  p.num_loras = 2;
  p.num_experts = 8;
  EXPECT_NO_THROW(choose_cake_plan(p));
  p.arch = static_cast<Arch>(77);
  expect_error([&] { choose_cake_plan(p); }, "arch");
}

}  // namespace
}  // namespace bgmv
}  // namespace cakemoe
