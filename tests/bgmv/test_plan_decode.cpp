// SM90 decode plans (register-shrink region, expand schedule) and the A/B overrides of the generic
// shrink launch and expand schedule (plan.h).
#include <gtest/gtest.h>

#include <string>

#include "bgmv/h200_desc.h"
#include "bgmv/plan.h"
#include "cakemoe/errors.h"

namespace cakemoe {
namespace bgmv {
namespace {

TEST(BgmvPlanDecode, Sm90DecodeDefaults) {
  // SM90 decode defaults: the register shrink with one split in its region, else spec §4.1's; the
  // expand schedules of plan_generic_schedule.
  for (int64_t t : {1, 2, 4, 8}) {
    for (int64_t k : {1, 2, 6, 8}) {
      for (int64_t r : {8, 16, 32, 64}) {
        const ProblemDesc d = h200_desc(t, k, 3072, r);
        const PlanChoice c = choose_cake_plan(d);
        const std::string at = "T=" + std::to_string(t) + " k=" + std::to_string(k) +
                               " R=" + std::to_string(r);
        const bool region = register_shrink_region(d.num_pairs, r, Arch::kSm90a);
        EXPECT_EQ(region, d.num_pairs <= 48 && d.num_pairs * (r / 8) <= 96) << at;
        if (region) {
          // Form 6 (2-row blocks) while its P * R / 2 CTAs stay <= 64, then form 5 (4-row
          // blocks, P * R / 4), then form 3.
          const int64_t pr = d.num_pairs * r;
          EXPECT_EQ(shrink_form_number(c.shrink_launch->kind), pr / 2 <= 64   ? 6
                                                               : pr / 4 <= 64 ? 5
                                                                              : 3)
              << at;
          EXPECT_EQ(c.shrink_launch->splits, 1) << at;
        } else {
          const ShrinkLaunch spec = select_generic_shrink(d.num_pairs, r, 3072, Arch::kSm90a);
          EXPECT_EQ(c.shrink_launch->splits, spec.splits) << at;
          // Form 4 from 384 CTAs; below, rank 64 takes form 3 (H 3072: rank 32 does not).
          const int expected = d.num_pairs * (r / 8) >= 384 ? 4
                               : r == 64                    ? 3
                                                            : shrink_form_number(spec.kind);
          EXPECT_EQ(shrink_form_number(c.shrink_launch->kind), expected) << at;
        }
        // The decode schedule at T <= 4 with 8 routes (rank <= 32) and at T 1 with 6 or more
        // (rank >= 32); else wide, but narrow at rank 64 with more than two routes per token.
        const bool decode = (t <= 4 && k >= 8 && r <= 32) || (t == 1 && k >= 6 && r >= 32);
        EXPECT_EQ(c.schedule_id, decode ? 2 : r == 64 && k > 2 ? 0 : 1) << at;
        EXPECT_EQ(plan_generic_schedule(t, d.num_pairs, r, Arch::kSm90a), c.schedule_id) << at;
        // Elsewhere spec §4.3's schedule: narrow up to T 8.
        EXPECT_EQ(plan_generic_schedule(t, d.num_pairs, r, Arch::kSm100a), 0) << at;
      }
    }
  }
  EXPECT_EQ(plan_generic_schedule(16, 32, 64, Arch::kSm90a), 1);
  // The decode schedule's edges: 8 routes per token up to T 4 (T 5 and 7 routes are out), the
  // pre-wait scan's 256 pairs, rank 64 only at T 1.
  EXPECT_EQ(plan_generic_schedule(4, 32, 16, Arch::kSm90a), 2);
  EXPECT_EQ(plan_generic_schedule(5, 40, 16, Arch::kSm90a), 1);
  EXPECT_EQ(plan_generic_schedule(4, 31, 16, Arch::kSm90a), 1);
  EXPECT_EQ(plan_generic_schedule(1, 256, 32, Arch::kSm90a), 2);
  EXPECT_EQ(plan_generic_schedule(1, 257, 32, Arch::kSm90a), 1);
  EXPECT_EQ(plan_generic_schedule(1, 5, 64, Arch::kSm90a), 0);
  EXPECT_EQ(plan_generic_schedule(1, 6, 64, Arch::kSm90a), 2);
  EXPECT_EQ(plan_generic_schedule(2, 16, 64, Arch::kSm90a), 0);
  EXPECT_EQ(plan_generic_schedule(1, 6, 16, Arch::kSm90a), 1);
  EXPECT_EQ(plan_generic_schedule(1, 8, 16, Arch::kSm100a), 0);
  // The region's edges: T 8 k 6 at rank 16 (P 48, 96 CTAs) is in; k 8 (128 CTAs) and P 49 out.
  EXPECT_TRUE(register_shrink_region(48, 16, Arch::kSm90a));
  EXPECT_FALSE(register_shrink_region(64, 16, Arch::kSm90a));
  EXPECT_FALSE(register_shrink_region(49, 8, Arch::kSm90a));
  EXPECT_FALSE(register_shrink_region(48, 16, Arch::kSm100a));
  // Forms 6 / 5 inside the region up to 64 CTAs of 2 / 4 rows: at rank 16 P 8 takes form 6, P 9
  // and P 16 form 5, P 17 form 3; at rank 64 P 2 form 6, P 4 form 5, P 6 form 3.
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(8, 16, 3072, Arch::kSm90a).kind), 6);
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(9, 16, 3072, Arch::kSm90a).kind), 5);
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(16, 16, 3072, Arch::kSm90a).kind), 5);
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(17, 16, 3072, Arch::kSm90a).kind), 3);
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(2, 64, 3072, Arch::kSm90a).kind), 6);
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(4, 64, 3072, Arch::kSm90a).kind), 5);
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(6, 64, 3072, Arch::kSm90a).kind), 3);
  EXPECT_LT(shrink_form_number(plan_generic_shrink(4, 64, 3072, Arch::kSm100a).kind), 5);
  // Rank 32 takes the register form above the region from H 4096; never off SM90.
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(64, 32, 4096, Arch::kSm90a).kind), 3);
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(64, 32, 3072, Arch::kSm90a).kind),
            shrink_form_number(select_generic_shrink(64, 32, 3072, Arch::kSm90a).kind));
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(512, 64, 2048, Arch::kSm100a).kind),
            shrink_form_number(select_generic_shrink(512, 64, 2048, Arch::kSm100a).kind));
  // Form 4 (one k tile per trip) from 384 shrink CTAs at every rank and H, with the selector's
  // splits (one there), so the plan's bits do not move; SM90 only.
  EXPECT_EQ(shrink_form_number(plan_generic_shrink(95, 32, 3072, Arch::kSm90a).kind),
            2);  // 380 CTAs: spec's ring
  for (const int64_t r : {8, 16, 32, 64}) {
    const int64_t p = 384 / (r / 8);
    for (const int64_t h : {256, 2688, 3072, 4096}) {
      const ShrinkLaunch launch = plan_generic_shrink(p, r, h, Arch::kSm90a);
      EXPECT_EQ(shrink_form_number(launch.kind), 4) << r << " " << h;
      EXPECT_EQ(launch.splits, select_generic_shrink(p, r, h, Arch::kSm90a).splits);
      EXPECT_EQ(launch.splits, 1);
      EXPECT_EQ(shrink_form_number(plan_generic_shrink(4 * p, r, h, Arch::kSm90a).kind), 4);
      EXPECT_NE(shrink_form_number(plan_generic_shrink(p, r, h, Arch::kSm100a).kind), 4);
    }
  }
}

TEST(BgmvPlanShrinkOverride, FormAndSplitsAreTakenAndChecked) {
  // 3072/16/T7/k8 (P 56, above the register region): the selector's (form 2, 2 splits).
  ProblemDesc d = h200_desc(7, 8, 3072, 16);
  const PlanChoice chosen = choose_cake_plan(d);
  ASSERT_TRUE(chosen.shrink_launch.has_value());
  EXPECT_EQ(shrink_form_number(chosen.shrink_launch->kind), 2);
  EXPECT_EQ(chosen.shrink_launch->splits, 2);
  d.overrides.shrink = ShrinkLaunch{ShrinkKind::kRegisters, 1};
  const PlanChoice forced = choose_cake_plan(d);
  ASSERT_TRUE(forced.shrink_launch.has_value());
  EXPECT_EQ(shrink_form_number(forced.shrink_launch->kind), 3);
  EXPECT_EQ(forced.shrink_launch->splits, 1);
  EXPECT_EQ(forced.shrink_splits, 1);
  d.overrides.shrink =
      ShrinkLaunch{ShrinkKind::kRegistersOneTile, 1};  // form 4 (one k tile per register trip)
  EXPECT_EQ(shrink_form_number(choose_cake_plan(d).shrink_launch->kind), 4);
  d.overrides.shrink = ShrinkLaunch{ShrinkKind::kRegistersHalfBlock,
                                    1};  // form 5 (half rank blocks), one split only
  EXPECT_EQ(shrink_form_number(choose_cake_plan(d).shrink_launch->kind), 5);
  // Kinds past the enum (no unit has them), sub-blocks with splits, splits outside 1..8.
  for (const ShrinkLaunch bad :
       {ShrinkLaunch{static_cast<ShrinkKind>(6), 1}, ShrinkLaunch{static_cast<ShrinkKind>(-1), 1},
        ShrinkLaunch{ShrinkKind::kRegistersHalfBlock, 2},
        ShrinkLaunch{ShrinkKind::kRegistersQuarterBlock, 2},
        ShrinkLaunch{ShrinkKind::kRegisters, 0}, ShrinkLaunch{ShrinkKind::kRegisters, 9}}) {
    d.overrides.shrink = bad;
    EXPECT_THROW(choose_cake_plan(d), InvalidArgument)
        << shrink_form_number(bad.kind) << "," << bad.splits;
  }
  ProblemDesc many = h200_desc(200, 1, 3072, 32);  // 200 pairs: one split only
  many.overrides.shrink = ShrinkLaunch{ShrinkKind::kRegisters, 2};
  EXPECT_THROW(choose_cake_plan(many), InvalidArgument);
  many.overrides.shrink = ShrinkLaunch{ShrinkKind::kRegisters, 1};
  EXPECT_EQ(shrink_form_number(choose_cake_plan(many).shrink_launch->kind), 3);
  // The generic expand schedule: wide at this decode size, forced narrow or decode; 3 is none.
  ProblemDesc wide = h200_desc(4, 2, 3072, 16);
  EXPECT_EQ(choose_cake_plan(wide).schedule_id, 1);
  wide.overrides.generic_schedule = 0;
  EXPECT_EQ(choose_cake_plan(wide).schedule_id, 0);
  wide.overrides.generic_schedule = 2;
  EXPECT_EQ(choose_cake_plan(wide).schedule_id, 2);
  wide.overrides.generic_schedule = 3;
  EXPECT_THROW(choose_cake_plan(wide), InvalidArgument);
}

}  // namespace
}  // namespace bgmv
}  // namespace cakemoe
