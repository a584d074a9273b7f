// BgmvPlan::run on the CPU backend (spec bgmv §2, §3, §8, §11): results, attributes, replays,
// column slices, the portable semantics and grouped / split orders.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "bgmv/plan.h"
#include "cakemoe/bgmv.h"
#include "cakemoe/errors.h"
#include "reference/bgmv/bgmv.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace bgmv {
namespace {

using bgmv_test::Case;
using bgmv_test::CaseSpec;
using bgmv_test::make_case;
using bgmv_test::PairOrder;

BgmvPlan prepare(Case& c, const BgmvOptions& options = BgmvOptions()) {
  return prepare_bgmv_moe(c.x_view(), c.a_views(), c.b_views(), c.sorted_view(),
                          c.experts_view(), c.lora_view(), c.weights_view(), c.spec.experts,
                          options);
}

// Copies a (possibly column-sliced) y view into a dense vector.
std::vector<float> dense_f(const TensorView& y) {
  std::vector<float> out;
  for (int64_t t = 0; t < y.shape[0]; ++t) {
    const float* row = y.ptr<float>() + t * y.strides[0];
    out.insert(out.end(), row, row + y.shape[1]);
  }
  return out;
}

void expect_close_to_oracle(const Case& c, const TensorView& y, const std::string& label) {
  bgmv_test::expect_close_to_oracle(c, dense_f(y), label);
}

// Silences and counts fallback warnings for one test.
class HookGuard {
 public:
  HookGuard() : previous_(set_warning_hook([this](const std::string&) { ++count_; })) {}
  ~HookGuard() { set_warning_hook(previous_); }
  int count() const { return count_; }

 private:
  int count_ = 0;
  WarningHook previous_;
};

TEST(BgmvRun, CakeEligibleAttributesAndResult) {
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    CaseSpec spec;
    spec.dtype = dtype;
    spec.tokens = 32;
    spec.hidden = 768;
    spec.rank = 16;
    spec.seed = 201;
    Case c = make_case(spec);
    BgmvPlan plan = prepare(c);
    EXPECT_EQ(plan.backend_used(), "cpu_reference");
    EXPECT_EQ(plan.variant(), "generic");
    EXPECT_TRUE(plan.fallback_reason().empty());
    const ShrinkLaunch expected = plan_generic_shrink(64, 16, 768, Arch::kSm90a);
    ASSERT_TRUE(plan.shrink_launch().has_value());
    EXPECT_EQ(plan.shrink_launch()->kind, expected.kind);
    EXPECT_EQ(plan.shrink_launch()->splits, expected.splits);
    EXPECT_EQ(plan.schedule_id(), 1);
    EXPECT_EQ(plan.pdl_mode(), 1);
    EXPECT_FALSE(plan.grouped());
    EXPECT_FALSE(plan.order_remap());
    EXPECT_EQ(plan.route_index().numel(), route_index_layout(32).total_words);
    EXPECT_EQ(plan.x().data, c.x.data());
    testbed::poison(plan.y_accum());
    testbed::poison(plan.shrink_out());
    const TensorView y = plan.run();
    EXPECT_EQ(y.data, plan.y_accum().data);
    expect_close_to_oracle(c, y, dtype_name(dtype));
  }
}

TEST(BgmvRun, ReplaysAreBitwiseIdenticalAndReadCurrentContents) {
  CaseSpec spec;
  spec.tokens = 24;
  spec.hidden = 1024;
  spec.rank = 32;
  spec.top_k = 4;
  spec.order = PairOrder::kExpertSorted;
  spec.seed = 202;
  Case c = make_case(spec);
  BgmvPlan plan = prepare(c);
  const std::vector<float> first = dense_f(plan.run());
  const std::vector<uint16_t> first_shrink(plan.shrink_out().ptr<uint16_t>(),
                                           plan.shrink_out().ptr<uint16_t>() +
                                               plan.shrink_out().numel());
  for (int i = 0; i < 7; ++i) {
    testbed::poison(plan.y_accum());
    EXPECT_EQ(dense_f(plan.run()), first);
    EXPECT_EQ(0, std::memcmp(first_shrink.data(), plan.shrink_out().data,
                             first_shrink.size() * sizeof(uint16_t)));
  }
  // spec §3.3: after r runs word0 == r and word1 == (r - 1) & 1.
  EXPECT_EQ(plan.route_index().ptr<int32_t>()[0], 8);
  EXPECT_EQ(plan.route_index().ptr<int32_t>()[1], 1);
  // Contents may change: x *= 0.5 (exact in bf16), the next run reads it.
  for (auto& v : c.x) {
    v = reference::bgmv::narrow(spec.dtype, 0.5f * reference::bgmv::widen(spec.dtype, v));
  }
  expect_close_to_oracle(c, plan.run(), "x *= 0.5");
  plan.close();
  expect_close_to_oracle(c, plan.run(), "after close");
}

TEST(BgmvRun, ColumnSliceKeepsCanariesIntact) {
  CaseSpec spec;
  spec.tokens = 16;
  spec.hidden = 512;
  spec.rank = 32;
  spec.seed = 203;
  Case c = make_case(spec);
  const std::vector<float> contiguous = dense_f(prepare(c).run());
  const int64_t wide = spec.hidden + 64;
  std::vector<float> buffer(spec.tokens * wide, std::nanf(""));
  BgmvOptions options;
  options.y_accum = TensorView(buffer.data() + 32, DType::kFP32, {spec.tokens, spec.hidden},
                               {wide, 1});
  BgmvPlan plan = prepare(c, options);
  const TensorView y = plan.run();
  EXPECT_EQ(y.data, buffer.data() + 32);
  EXPECT_EQ(dense_f(y), contiguous);
  for (int64_t t = 0; t < spec.tokens; ++t) {
    for (int64_t i = 0; i < wide; ++i) {
      if (i >= 32 && i < 32 + spec.hidden) continue;
      ASSERT_TRUE(std::isnan(buffer[t * wide + i])) << "canary " << t << ", " << i;
    }
  }
}

TEST(BgmvRun, PairOrdersMatchBitwiseThroughTheApi) {
  CaseSpec spec;
  spec.tokens = 40;
  spec.hidden = 2048;
  spec.rank = 16;
  spec.experts = 16;
  spec.top_k = 2;
  spec.seed = 204;
  Case token_major = make_case(spec);
  spec.order = PairOrder::kSlotMajor;
  Case slot_major = make_case(spec);
  spec.order = PairOrder::kExpertSorted;
  Case expert_sorted = make_case(spec);
  const std::vector<float> a = dense_f(prepare(token_major).run());
  EXPECT_EQ(dense_f(prepare(slot_major).run()), a);
  EXPECT_EQ(dense_f(prepare(expert_sorted).run()), a);
  expect_close_to_oracle(expert_sorted, prepare(expert_sorted).run(), "expert-sorted");
}

TEST(BgmvRun, PaddingExtraRouteAndInactiveTokens) {
  CaseSpec spec;
  spec.tokens = 8;
  spec.hidden = 768;
  spec.rank = 32;
  spec.seed = 205;
  spec.nan_unused_blocks = false;
  Case base = make_case(spec);
  Case padded = base;
  padded.add_pair(-1, 0, 0.0f);
  padded.add_pair(spec.tokens, 0, 0.0f);
  const std::vector<float> y_base = dense_f(prepare(base).run());
  EXPECT_EQ(dense_f(prepare(padded).run()), y_base);
  Case extra = base;
  extra.lora_indices[0] = 0;
  extra.add_pair(0, 0, 0.25f);
  BgmvPlan plan = prepare(extra);
  expect_close_to_oracle(extra, plan.run(), "extra route");
  Case none = base;
  std::fill(none.lora_indices.begin(), none.lora_indices.end(), -1);
  BgmvPlan zero = prepare(none);
  testbed::poison(zero.y_accum());
  for (float v : dense_f(zero.run())) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    ASSERT_EQ(bits, 0u);
  }
}

TEST(BgmvRun, SplitKTopK20AndTinyShapes) {
  CaseSpec split;
  split.tokens = 25;  // P 50, rank 8: above the SM90 register-shrink region, 3 splits
  split.hidden = 4096;
  split.rank = 8;
  split.seed = 206;
  Case a = make_case(split);
  BgmvPlan pa = prepare(a);
  EXPECT_EQ(pa.shrink_launch()->splits, 3);
  expect_close_to_oracle(a, pa.run(), "split-K");
  CaseSpec scan;
  scan.tokens = 24;
  scan.hidden = 2048;
  scan.rank = 8;
  scan.experts = 32;
  scan.top_k = 20;
  scan.order = PairOrder::kSlotMajor;
  scan.seed = 207;
  Case b = make_case(scan);
  expect_close_to_oracle(b, prepare(b).run(), "k=20");
  CaseSpec tiny;
  tiny.tokens = 1;
  tiny.experts = 1;
  tiny.rank = 8;
  tiny.top_k = 1;
  tiny.seed = 208;
  Case d = make_case(tiny);
  BgmvPlan pd = prepare(d);
  EXPECT_EQ(pd.schedule_id(), 1);  // SM90 decode: the wide schedule (plan_generic_schedule)
  expect_close_to_oracle(d, pd.run(), "T=1 E=1 R=8 k=1");
}

TEST(BgmvRun, GroupedForcedKeepsShrinkBitsAndStaysClose) {
  CaseSpec spec;
  spec.tokens = 40;
  spec.hidden = 736;
  spec.rank = 32;
  spec.experts = 8;
  spec.top_k = 4;
  spec.seed = 209;
  Case c = make_case(spec);
  BgmvOptions on, off;
  on.grouped = true;
  off.grouped = false;
  BgmvPlan grouped = prepare(c, on);
  BgmvPlan per_route = prepare(c, off);
  EXPECT_TRUE(grouped.grouped());
  EXPECT_FALSE(per_route.grouped());
  const std::vector<float> yg = dense_f(grouped.run());
  const std::vector<float> yp = dense_f(per_route.run());
  EXPECT_EQ(0, std::memcmp(grouped.shrink_out().data, per_route.shrink_out().data,
                           grouped.shrink_out().nbytes()));
  for (size_t i = 0; i < yg.size(); ++i) EXPECT_NEAR(yg[i], yp[i], 1e-5 + 1e-5 * std::fabs(yp[i]));
  EXPECT_EQ(dense_f(grouped.run()), yg);
  EXPECT_EQ(grouped.route_index().ptr<int32_t>()[0], 0);  // the grouped pipeline skips it
  // Forced order remap: bitwise identical to identity dispatch.
  BgmvOptions remap;
  remap.order_remap = true;
  BgmvPlan remapped = prepare(c, remap);
  EXPECT_TRUE(remapped.order_remap());
  EXPECT_EQ(remapped.shrink_launch()->kind, ShrinkKind::kRing2Stage);
  EXPECT_EQ(dense_f(remapped.run()), yp);
}

TEST(BgmvRun, PortablePlansRunAndMatch) {
  HookGuard hooks;
  struct Portable {
    DType dtype;
    int64_t tokens, hidden, rank, slices, feat_out;
  };
  const Portable cases[] = {{DType::kFP16, 4, 3072, 32, 2, 0},
                            {DType::kBF16, 40, 2048, 16, 2, 0},
                            {DType::kBF16, 9, 1000, 12, 1, 0},
                            {DType::kFP16, 5, 2052, 24, 1, 0},
                            {DType::kBF16, 6, 512, 16, 1, 200}};
  uint64_t seed = 210;
  for (const Portable& p : cases) {
    CaseSpec spec;
    spec.dtype = p.dtype;
    spec.tokens = p.tokens;
    spec.hidden = p.hidden;
    spec.rank = p.rank;
    spec.slices = p.slices;
    spec.feat_out = p.feat_out;
    spec.seed = ++seed;
    Case c = make_case(spec);
    BgmvPlan plan = prepare(c);
    EXPECT_EQ(plan.backend_used(), "cpu_reference");
    EXPECT_EQ(plan.variant(), "portable");
    EXPECT_FALSE(plan.fallback_reason().empty());
    EXPECT_FALSE(plan.schedule_id().has_value());
    EXPECT_FALSE(plan.shrink_launch().has_value());
    EXPECT_FALSE(plan.route_index().defined());
    testbed::poison(plan.y_accum());
    const std::vector<float> y = dense_f(plan.run());
    expect_close_to_oracle(c, plan.y_accum(), plan.fallback_reason());
    EXPECT_EQ(dense_f(plan.run()), y);
  }
}

TEST(BgmvRun, CallerWorkspacesAreUsed) {
  Case c = make_case(CaseSpec());
  std::vector<uint16_t> shrink(c.num_pairs() * c.spec.rank, 0xFFFF);
  std::vector<float> y(c.spec.tokens * c.spec.hidden, std::nanf(""));
  BgmvOptions options;
  options.shrink_out = TensorView(shrink.data(), c.spec.dtype, {1, c.num_pairs(), c.spec.rank});
  options.y_accum = TensorView(y.data(), DType::kFP32, {c.spec.tokens, c.spec.hidden});
  BgmvPlan plan = prepare(c, options);
  EXPECT_EQ(plan.run().data, y.data());
  EXPECT_EQ(plan.shrink_out().data, shrink.data());
  for (float v : y) ASSERT_FALSE(std::isnan(v));
  expect_close_to_oracle(c, plan.y_accum(), "caller workspaces");
}

TEST(BgmvRun, OutOfRangeIndicesAtRunTimeWriteNothing) {
  Case c = make_case(CaseSpec());
  BgmvPlan plan = prepare(c);
  testbed::poison(plan.y_accum());
  c.expert_ids[1] = c.spec.experts + 3;
  EXPECT_THROW(plan.run(), InvalidArgument);
  for (float v : dense_f(plan.y_accum())) ASSERT_TRUE(std::isnan(v));
  c.expert_ids[1] = 0;
  c.lora_indices[1] = 7;
  EXPECT_THROW(plan.run(), InvalidArgument);
}

}  // namespace
}  // namespace bgmv
}  // namespace cakemoe
