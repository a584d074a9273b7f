// Selection of the fused decode path (cakemoe extension, docs/decisions/bgmv-gpu-runtime.md):
// grid size, co-residency, the SM90 heuristic, forcing, and what the CPU backend reports.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "bgmv/h200_desc.h"
#include "bgmv/plan.h"
#include "cakemoe/bgmv.h"
#include "cakemoe/errors.h"

namespace cakemoe {
namespace bgmv {
namespace {

TEST(BgmvPlanFusedDecode, GridCtas) {
  // 3072/32/T1/k2: splits 3 -> 2 * 4 * 3 shrink CTAs + 1 * 24 expand CTAs.
  EXPECT_EQ(fused_decode_ctas(1, 2, 3072, 32, 3), 24 + 24);
  // 3072/64/T8/k8: splits 1 -> 64 * 8 + 8 * 24.
  EXPECT_EQ(fused_decode_ctas(8, 64, 3072, 64, 1), 512 + 192);
  // H not a multiple of 128: the last expand CTA is partial.
  EXPECT_EQ(fused_decode_ctas(2, 4, 1000, 8, 1), 4 + 2 * 8);
}

TEST(BgmvPlanFusedDecode, FitsNeedsOccupancyAndAtMost128Pairs) {
  EXPECT_TRUE(
      fused_decode_fits(8, 64, 3072, 32, 1, kH200Sms, kH200FusedBlocksPerSm));  // 448 <= 660
  EXPECT_FALSE(
      fused_decode_fits(8, 64, 3072, 64, 1, kH200Sms, kH200FusedBlocksPerSm));  // 704 > 660
  EXPECT_TRUE(fused_decode_fits(8, 64, 3072, 64, 1, kH200Sms, 6));              // 704 <= 792
  EXPECT_FALSE(fused_decode_fits(1, 2, 3072, 32, 3, kH200Sms, 0));              // no kernel built
  EXPECT_FALSE(fused_decode_fits(1, 129, 1024, 8, 1, kH200Sms, kH200FusedBlocksPerSm));
  EXPECT_TRUE(fused_decode_fits(1, 128, 1024, 8, 1, kH200Sms, kH200FusedBlocksPerSm));
}

TEST(BgmvPlanFusedDecode, OptInOnlyAndDecodeDefaults) {
  // No heuristic picks the fused decode (2026-11-30 H200 table). SM90 decode defaults: the
  // register shrink with one split in its region, else spec §4.1's; the wide expand schedule but
  // at rank 64 with more than two routes per token.
  for (int64_t t : {1, 2, 4, 8}) {
    for (int64_t k : {1, 2, 6, 8}) {
      for (int64_t r : {8, 16, 32, 64}) {
        const ProblemDesc d = h200_desc(t, k, 3072, r);
        const PlanChoice c = choose_cake_plan(d);
        const std::string at = "T=" + std::to_string(t) + " k=" + std::to_string(k) +
                               " R=" + std::to_string(r);
        EXPECT_FALSE(c.fused_decode) << at;
        const bool region = register_shrink_region(d.num_pairs, r, Arch::kSm90a);
        EXPECT_EQ(region, d.num_pairs <= 48 && d.num_pairs * (r / 8) <= 96) << at;
        if (region) {
          EXPECT_EQ(c.shrink_launch->form, 3) << at;
          EXPECT_EQ(c.shrink_launch->splits, 1) << at;
        } else {
          const ShrinkLaunch spec = select_generic_shrink(d.num_pairs, r, 3072, Arch::kSm90a);
          EXPECT_EQ(c.shrink_launch->splits, spec.splits) << at;
          // Rank 64 takes the register form above the region too (H 3072: rank 32 does not).
          EXPECT_EQ(c.shrink_launch->form, r == 64 ? 3 : spec.form) << at;
        }
        EXPECT_EQ(c.schedule_id, r == 64 && k > 2 ? 0 : 1) << at;
        EXPECT_EQ(plan_generic_schedule(t, d.num_pairs, r, Arch::kSm90a), c.schedule_id) << at;
        // Elsewhere spec §4.3's schedule: narrow up to T 8.
        EXPECT_EQ(plan_generic_schedule(t, d.num_pairs, r, Arch::kSm100a), 0) << at;
      }
    }
  }
  EXPECT_EQ(plan_generic_schedule(16, 32, 64, Arch::kSm90a), 1);
  // The region's edges: T 8 k 6 at rank 16 (P 48, 96 CTAs) is in; k 8 (128 CTAs) and P 49 out.
  EXPECT_TRUE(register_shrink_region(48, 16, Arch::kSm90a));
  EXPECT_FALSE(register_shrink_region(64, 16, Arch::kSm90a));
  EXPECT_FALSE(register_shrink_region(49, 8, Arch::kSm90a));
  EXPECT_FALSE(register_shrink_region(48, 16, Arch::kSm100a));
  // Rank 32 takes the register form above the region from H 4096; never off SM90.
  EXPECT_EQ(plan_generic_shrink(512, 32, 4096, Arch::kSm90a).form, 3);
  EXPECT_EQ(plan_generic_shrink(512, 32, 3072, Arch::kSm90a).form, 0);
  EXPECT_EQ(plan_generic_shrink(512, 64, 2048, Arch::kSm100a).form,
            select_generic_shrink(512, 64, 2048, Arch::kSm100a).form);
  ProblemDesc forced = h200_desc(8, 6, 3072, 16);
  forced.fused_decode = true;
  EXPECT_TRUE(choose_cake_plan(forced).fused_decode);
}

TEST(BgmvPlanFusedDecode, ForcingOnAndOff) {
  ProblemDesc off = h200_desc(1, 2, 3072, 32);
  off.fused_decode = false;
  EXPECT_FALSE(choose_cake_plan(off).fused_decode);
  // Forced on outside the heuristic window (T 16, Blackwell) where the grid still fits.
  ProblemDesc on = h200_desc(16, 2, 1024, 16);
  on.arch = Arch::kSm100a;
  on.fused_decode = true;
  EXPECT_TRUE(choose_cake_plan(on).fused_decode);
  // Forced on where it cannot run.
  const auto expect_refused = [](ProblemDesc d, const std::string& what) {
    d.fused_decode = true;
    try {
      choose_cake_plan(d);
      ADD_FAILURE() << "expected InvalidArgument(fused_decode): " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "fused_decode") << what << ": " << e.what();
    }
  };
  expect_refused(h200_desc(8, 8, 3072, 64), "grid too large");
  expect_refused(h200_desc(1, 200, 1024, 8), "P > 128");
  ProblemDesc unbuilt = h200_desc(1, 2, 3072, 32);
  unbuilt.fused_blocks_per_sm = 0;
  expect_refused(unbuilt, "kernel not built");
  ProblemDesc grouped = h200_desc(1, 2, 3072, 32);
  grouped.grouped = true;
  expect_refused(grouped, "grouped");
  ProblemDesc remap = h200_desc(1, 2, 3072, 32);
  remap.order_remap = true;
  expect_refused(remap, "order_remap");
}

TEST(BgmvPlanFusedDecode, PrintedInThePlanLine) {
  std::ostringstream os;
  ProblemDesc d = h200_desc(8, 6, 3072, 16);
  d.fused_decode = true;
  os << choose_cake_plan(d);
  EXPECT_NE(os.str().find("fused_decode=1"), std::string::npos) << os.str();
}

// The CPU backend reports the H200 choice (emulated occupancy) and its results do not depend on
// it: fused on and off give the same bits, and the §3.3 header advances the same way.
TEST(BgmvPlanFusedDecode, CpuBackendReportsChoiceWithSameBits) {
  bgmv_test::CaseSpec spec;
  spec.tokens = 8;
  spec.hidden = 2048;
  spec.rank = 8;
  spec.top_k = 7;
  bgmv_test::Case c = bgmv_test::make_case(spec);
  std::vector<std::vector<float>> ys;
  for (const bool forced : {true, false}) {
    BgmvOptions o;
    o.fused_decode = forced;
    BgmvPlan plan =
        prepare_bgmv_moe(c.x_view(), c.a_views(), c.b_views(), c.sorted_view(), c.experts_view(),
                         c.lora_view(), c.weights_view(), spec.experts, o);
    EXPECT_EQ(plan.fused_decode(), forced);
    EXPECT_EQ(plan.shrink_launch()->splits, 2);  // P 56, R 8, H 2048: min(2, ceil(128 / 56))
    for (int i = 0; i < 3; ++i) plan.run(nullptr);
    EXPECT_EQ(plan.route_index().ptr<int32_t>()[0], 3);
    EXPECT_EQ(plan.route_index().ptr<int32_t>()[1], 0);
    const TensorView y = plan.y_accum();
    ys.emplace_back(y.ptr<float>(), y.ptr<float>() + y.numel());
  }
  EXPECT_EQ(ys[0], ys[1]);
  // CAKEMOE_BGMV_FUSED_DECODE=1 opts in where the grid fits; an explicit option still wins.
  ::setenv("CAKEMOE_BGMV_FUSED_DECODE", "1", 1);
  const auto prepare = [&](std::optional<bool> forced) {
    BgmvOptions o;
    o.fused_decode = forced;
    return prepare_bgmv_moe(c.x_view(), c.a_views(), c.b_views(), c.sorted_view(), c.experts_view(),
                            c.lora_view(), c.weights_view(), spec.experts, o);
  };
  const bool env_default = prepare(std::nullopt).fused_decode();
  const bool env_off = prepare(false).fused_decode();
  ::unsetenv("CAKEMOE_BGMV_FUSED_DECODE");
  EXPECT_TRUE(env_default);
  EXPECT_FALSE(env_off);
  EXPECT_FALSE(prepare(std::nullopt).fused_decode());
}

TEST(BgmvPlanShrinkOverride, FormAndSplitsAreTakenAndChecked) {
  // 3072/16/T7/k8 (P 56, above the register region): the selector's (form 2, 2 splits).
  ProblemDesc d = h200_desc(7, 8, 3072, 16);
  const PlanChoice chosen = choose_cake_plan(d);
  ASSERT_TRUE(chosen.shrink_launch.has_value());
  EXPECT_EQ(chosen.shrink_launch->form, 2);
  EXPECT_EQ(chosen.shrink_launch->splits, 2);
  d.shrink_override = ShrinkLaunch{3, 1};
  const PlanChoice forced = choose_cake_plan(d);
  ASSERT_TRUE(forced.shrink_launch.has_value());
  EXPECT_EQ(forced.shrink_launch->form, 3);
  EXPECT_EQ(forced.shrink_launch->splits, 1);
  EXPECT_EQ(forced.shrink_splits, 1);
  d.fused_decode = true;
  EXPECT_TRUE(choose_cake_plan(d).fused_decode) << "fused_decode=true with a forced shrink";
  for (const ShrinkLaunch bad : {ShrinkLaunch{1, 1}, ShrinkLaunch{4, 1}, ShrinkLaunch{3, 0},
                                 ShrinkLaunch{3, 9}}) {
    d.shrink_override = bad;
    EXPECT_THROW(choose_cake_plan(d), InvalidArgument) << bad.form << "," << bad.splits;
  }
  ProblemDesc many = h200_desc(200, 1, 3072, 32);  // 200 pairs: one split only
  many.shrink_override = ShrinkLaunch{3, 2};
  EXPECT_THROW(choose_cake_plan(many), InvalidArgument);
  many.shrink_override = ShrinkLaunch{3, 1};
  EXPECT_EQ(choose_cake_plan(many).shrink_launch->form, 3);
  // The generic expand schedule: wide at this decode size, forced narrow; 2 is not a generic one.
  ProblemDesc wide = h200_desc(4, 2, 3072, 16);
  EXPECT_EQ(choose_cake_plan(wide).schedule_id, 1);
  wide.generic_schedule_override = 0;
  EXPECT_EQ(choose_cake_plan(wide).schedule_id, 0);
  wide.generic_schedule_override = 2;
  EXPECT_THROW(choose_cake_plan(wide), InvalidArgument);
}

}  // namespace
}  // namespace bgmv
}  // namespace cakemoe
