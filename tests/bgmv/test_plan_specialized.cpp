// Selection and forcing of the specialized variant (spec §7, §10 rule 15): the measured SM90
// windows, the forced variant's attributes, its refusals, and the CPU backend's bits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "bgmv/h200_desc.h"
#include "bgmv/overrides.h"
#include "bgmv/plan.h"
#include "bgmv/plan_impl.h"
#include "cakemoe/bgmv.h"
#include "cakemoe/errors.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace bgmv {
namespace {

ProblemDesc special_desc(int64_t tokens, int64_t top_k, int64_t hidden, int64_t rank) {
  ProblemDesc d = h200_desc(tokens, top_k, hidden, rank);
  d.specialized_built = true;
  return d;
}

ProblemDesc forced(ProblemDesc d, std::optional<int> schedule = std::nullopt) {
  d.overrides.variant = Variant::kSpecialized;
  d.overrides.specialized_schedule = schedule;
  return d;
}

template <typename Error>
void expect_refused(const ProblemDesc& d, const std::string& argument, const std::string& what) {
  try {
    choose_cake_plan(d);
    ADD_FAILURE() << "expected an error naming " << argument << ": " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << what << ": " << e.what();
  }
}

TEST(BgmvPlanSpecialized, Sm90WindowsFromMeasurements) {
  for (int64_t h : {2688, 3072}) {
    // k 2: specialized at T 1-8 and 32-256, generic at T 16 (P 32) and from P 1024, where the
    // grouped rule goes first since session 16 (T 512: grouped 0.949-0.962 of the body).
    for (int64_t t : {1, 4, 8, 32, 256}) {
      EXPECT_EQ(choose_cake_plan(special_desc(t, 2, h, 32)).variant, Variant::kSpecialized)
          << h << " " << t;
    }
    for (int64_t t : {16, 512, 1024, 2048, 4096}) {
      EXPECT_EQ(choose_cake_plan(special_desc(t, 2, h, 32)).variant, Variant::kGeneric)
          << h << " " << t;
    }
    EXPECT_TRUE(choose_cake_plan(special_desc(512, 2, h, 32)).grouped) << h;
    // k 8: specialized up to T 64 (P 512), grouped from T 128 (P 1024; 0.935-0.938).
    for (int64_t t : {1, 8, 16, 64}) {
      EXPECT_EQ(choose_cake_plan(special_desc(t, 8, h, 32)).variant, Variant::kSpecialized)
          << h << " " << t;
    }
    for (int64_t t : {128, 256}) {
      EXPECT_EQ(choose_cake_plan(special_desc(t, 8, h, 32)).variant, Variant::kGeneric) << h;
      EXPECT_TRUE(choose_cake_plan(special_desc(t, 8, h, 32)).grouped) << h;
    }
  }
  EXPECT_TRUE(is_specialized_shape(2688, 32));
  EXPECT_TRUE(is_specialized_shape(3072, 32));
  EXPECT_FALSE(is_specialized_shape(3072, 16));
  EXPECT_FALSE(is_specialized_shape(4096, 32));
  // Blackwell keeps spec §7's window; the generic override wins there.
  ProblemDesc bw = special_desc(256, 2, 3072, 32);
  bw.arch = Arch::kSm100a;
  EXPECT_EQ(choose_cake_plan(bw).variant, Variant::kSpecialized);
  bw.overrides.variant = Variant::kGeneric;
  EXPECT_EQ(choose_cake_plan(bw).variant, Variant::kGeneric);
}

TEST(BgmvPlanSpecialized, ForcedAttributes) {
  for (int64_t h : {2688, 3072}) {
    for (int64_t t : {1, 4, 8, 32, 512, 1024, 2048}) {
      const ProblemDesc d = special_desc(t, 2, h, 32);
      ProblemDesc generic = d;
      generic.overrides.variant = Variant::kGeneric;
      const PlanChoice g = choose_cake_plan(generic);
      const PlanChoice s = choose_cake_plan(forced(d));
      const std::string at = "H=" + std::to_string(h) + " T=" + std::to_string(t);
      EXPECT_EQ(s.variant, Variant::kSpecialized) << at;
      EXPECT_EQ(s.schedule_id, select_specialized_schedule(t, 2 * t, h, Arch::kSm90a)) << at;
      EXPECT_FALSE(s.shrink_launch.has_value()) << at;  // spec §1: None for specialized
      EXPECT_EQ(s.pdl_mode, 0) << at;                   // spec §4.4
      EXPECT_FALSE(s.grouped || s.order_remap) << at;
      // Same splits as the generic plan (same bits); kernels chain with the generic PDL mode.
      EXPECT_EQ(s.shrink_splits, plan_generic_shrink(2 * t, 32, h, Arch::kSm90a).splits) << at;
      EXPECT_EQ(s.launch_pdl_mode, 1) << at;  // SM90: early at every size
      EXPECT_EQ(g.shrink_splits, g.shrink_launch->splits) << at;
      EXPECT_EQ(g.launch_pdl_mode, 1) << at;
      EXPECT_EQ(g.pdl_mode, select_pdl_mode(Variant::kGeneric, t, h, Arch::kSm90a, 132)) << at;
    }
  }
  // The SM90 register-shrink region (P <= 24 at rank 32) runs one split where spec §4.1's rule
  // says 3 (P 8) or 2 (P 24).
  EXPECT_EQ(choose_cake_plan(forced(special_desc(4, 2, 3072, 32))).shrink_splits, 1);
  EXPECT_EQ(choose_cake_plan(forced(special_desc(12, 2, 3072, 32))).shrink_splits, 1);
  EXPECT_EQ(select_generic_shrink(8, 32, 3072, Arch::kSm90a).splits, 3);
  EXPECT_EQ(select_generic_shrink(24, 32, 3072, Arch::kSm90a).splits, 2);
  for (int schedule : {0, 1, 2}) {
    EXPECT_EQ(choose_cake_plan(forced(special_desc(64, 8, 2688, 32), schedule)).schedule_id,
              schedule);
  }
  std::ostringstream os;
  os << choose_cake_plan(forced(special_desc(1024, 2, 3072, 32)));
  EXPECT_NE(os.str().find("variant=specialized"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("schedule_id=2"), std::string::npos) << os.str();
}

TEST(BgmvPlanSpecialized, ForcedRefusals) {
  expect_refused<InvalidArgument>(forced(special_desc(8, 2, 4096, 32)), "variant", "hidden 4096");
  expect_refused<InvalidArgument>(forced(special_desc(8, 2, 3072, 16)), "variant", "rank 16");
  expect_refused<InvalidArgument>(forced(special_desc(8, 2, 2688, 64)), "variant", "rank 64");
  ProblemDesc d = forced(special_desc(1024, 2, 3072, 32));
  d.grouped = true;
  expect_refused<InvalidArgument>(d, "grouped", "grouped forced");
  d = forced(special_desc(512, 2, 2688, 32));
  d.order_remap = true;
  expect_refused<InvalidArgument>(d, "order_remap", "spec §10 rule 15");
  d = forced(special_desc(512, 2, 2688, 32));
  d.specialized_built = false;
  expect_refused<Unsupported>(d, "variant", "unit not built");
  expect_refused<InvalidArgument>(forced(special_desc(8, 2, 3072, 32), 3), "schedule_id",
                                  "schedule 3");
  d = special_desc(16, 2, 3072, 32);  // P 32: outside the SM90 windows, generic
  d.overrides.specialized_schedule = 1;
  expect_refused<InvalidArgument>(d, "schedule_id", "schedule on a generic plan");
  d = special_desc(8, 2, 3072, 32);
  d.overrides.variant = Variant::kPortable;  // prepare's business, not the Cake planner's
  expect_refused<InvalidArgument>(d, "variant", "portable forced into the Cake planner");
  // grouped=false / order_remap=false are no conflict.
  d = forced(special_desc(8, 2, 3072, 32));
  d.grouped = false;
  d.order_remap = false;
  EXPECT_EQ(choose_cake_plan(d).variant, Variant::kSpecialized);
}

/// A CPU plan of `c` with the given overrides.
BgmvPlan prepare_cpu(bgmv_test::Case& c, const PlanOverrides& overrides,
                     const BgmvOptions& options = BgmvOptions()) {
  return BgmvPlan(detail::prepare_impl(c.x_view(), c.a_views(), c.b_views(), c.sorted_view(),
                                       c.experts_view(), c.lora_view(), c.weights_view(),
                                       c.spec.experts, options, overrides));
}

std::vector<float> y_of(BgmvPlan& plan) {
  plan.run(nullptr);
  const TensorView y = plan.y_accum();
  return std::vector<float>(y.ptr<float>(), y.ptr<float>() + y.numel());
}

// The CPU backend reports the forced choice and runs the canonical order with the generic
// splits, so a forced specialized plan gives the generic plan's bits.
TEST(BgmvPlanSpecialized, CpuBackendForcedSameBitsAsGeneric) {
  for (int64_t t : {4, 40}) {
    bgmv_test::CaseSpec spec;
    spec.hidden = 2688;
    spec.rank = 32;
    spec.tokens = t;
    spec.top_k = 2;
    spec.experts = 16;
    bgmv_test::Case c = bgmv_test::make_case(spec);
    PlanOverrides special;
    special.variant = Variant::kSpecialized;
    BgmvPlan s = prepare_cpu(c, special);
    PlanOverrides generic;
    generic.variant = Variant::kGeneric;
    BgmvPlan g = prepare_cpu(c, generic);
    EXPECT_EQ(s.variant(), "specialized");
    EXPECT_EQ(g.variant(), "generic");
    EXPECT_FALSE(s.shrink_launch().has_value());
    EXPECT_EQ(s.pdl_mode(), 0);
    EXPECT_EQ(s.schedule_id(),
              select_specialized_schedule(t, static_cast<int64_t>(c.sorted_token_ids.size()), 2688,
                                          Arch::kSm90a));
    EXPECT_EQ(y_of(s), y_of(g)) << "T=" << t;
    special.specialized_schedule = 2;
    EXPECT_EQ(prepare_cpu(c, special).schedule_id(), 2);
  }
  bgmv_test::CaseSpec other;
  other.hidden = 2048;
  other.rank = 32;
  bgmv_test::Case c = bgmv_test::make_case(other);
  PlanOverrides special;
  special.variant = Variant::kSpecialized;
  try {
    prepare_cpu(c, special);
    ADD_FAILURE() << "expected InvalidArgument(variant) for hidden 2048";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "variant");
  }
}

// The variant is forced through PlanOverrides only: the former A/B environment switches change
// nothing (the library reads no CAKEMOE_BGMV_* variable), and a typo in the overrides' text form
// raises InvalidArgument("overrides").
TEST(BgmvPlanSpecialized, OverridesNotEnvironment) {
  bgmv_test::CaseSpec spec;
  spec.hidden = 3072;
  spec.rank = 32;
  spec.tokens = 8;
  spec.top_k = 6;  // P 48: above the register-shrink region
  spec.experts = 16;
  bgmv_test::Case special_case = bgmv_test::make_case(spec);
  spec.hidden = 2048;
  bgmv_test::Case other_case = bgmv_test::make_case(spec);
  const auto variant = [](bgmv_test::Case& c, const std::string& overrides,
                          std::optional<bool> grouped) {
    BgmvOptions o;
    o.grouped = grouped;
    return prepare_cpu(c, parse_plan_overrides(overrides), o).variant();
  };
  // Unset: T 8 is inside the SM90 windows (the CPU backend reports an SM90 device's choice).
  EXPECT_EQ(variant(special_case, "", std::nullopt), "specialized");
  EXPECT_EQ(variant(special_case, "variant=generic", std::nullopt), "generic");
  EXPECT_EQ(variant(special_case, "variant=specialized", std::nullopt), "specialized");
  EXPECT_EQ(variant(other_case, "", std::nullopt), "generic");
  EXPECT_EQ(variant(special_case, "", true), "generic");
  EXPECT_THROW(variant(other_case, "variant=specialized", std::nullopt), InvalidArgument);
  EXPECT_EQ(variant(special_case, "variant=portable", std::nullopt), "portable");
  {
    const testbed::ScopedEnv env_variant("CAKEMOE_BGMV_VARIANT", "generic");
    const testbed::ScopedEnv env_shrink("CAKEMOE_BGMV_SHRINK", "not a shrink");
    const testbed::ScopedEnv env_schedule("CAKEMOE_BGMV_SCHEDULE", "7");
    EXPECT_EQ(variant(special_case, "", std::nullopt), "specialized");
  }
  std::string typo_argument;
  try {
    parse_plan_overrides("variant=fast");
  } catch (const InvalidArgument& e) {
    typo_argument = e.argument();
  }
  EXPECT_EQ(typo_argument, "overrides");
}

}  // namespace
}  // namespace bgmv
}  // namespace cakemoe
