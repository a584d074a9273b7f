// The specialized variant on the GPU (spec §7: hidden 2688 / 3072, rank 32), forced in each of
// its three expand schedules: y and shrink_out bitwise equal to the CPU canonical order with the
// generic plan's splits (so also to the generic GPU plan), over >= 8 poisoned graph replays;
// padding, LoRA -1, extra and scanned routes, column-slice y with NaN canaries, contents changed
// between replays, outer capture, the §3.3 header, and the default choice on SM90.

#include <string>
#include <vector>

#include "bgmv/plan.h"
#include "bgmv/plan_impl.h"
#include "cakemoe/errors.h"
#include "bgmv/gpu/bgmv_plan_gpu.h"

namespace cakemoe {
namespace bgmv_gpu {
namespace {

constexpr int kReplays = 8;

CaseSpec special_spec(DType dtype, int64_t hidden, int64_t tokens, int64_t top_k, PairOrder order,
                      uint64_t seed) {
  return gpu_spec(dtype, hidden, 32, tokens, top_k, order, 2, 32, seed);
}

/// A GPU plan with the variant forced (0 generic, 1 specialized) and, for 1, the schedule.
BgmvPlan prepare_forced(const GpuCase& g, int variant, int schedule,
                        const BgmvOptions& options = BgmvOptions()) {
  bgmv::PlanOverrides overrides;
  overrides.variant = variant == 1 ? bgmv::Variant::kSpecialized : bgmv::Variant::kGeneric;
  if (schedule >= 0) overrides.specialized_schedule = schedule;
  return BgmvPlan(bgmv::detail::prepare_impl(g.x, g.views(g.a), g.views(g.b), g.sorted, g.experts,
                                             g.loras, g.weights, g.host.spec.experts, options,
                                             overrides));
}

#define CAKEMOE_REQUIRE_SPECIALIZED(hidden)                                              \
  do {                                                                                   \
    CAKEMOE_REQUIRE_GPU();                                                               \
    if (!bgmv::detail::specialized_unit_built(hidden)) {                                 \
      GTEST_SKIP() << "no specialized unit for hidden " << (hidden) << " in this build"; \
    }                                                                                    \
  } while (0)

/// Every schedule forced: `kReplays` poisoned graph replays each, y and shrink_out bitwise equal
/// to the CPU plan of the per-route pipeline (canonical order, generic splits) and to the generic
/// per-route GPU plan; within atol = rtol = 1e-5 of the default CPU plan when that one is grouped
/// (spec §3.2 caveat); the fp64 oracle at 1e-2 once. `options` may carry y_accum.
void check_specialized(GpuCase& g, const std::string& label, BgmvOptions options = {}) {
  const int64_t h = g.host.spec.hidden, r = g.host.spec.rank;
  options.grouped = false;  // the specialized variant is a per-route pipeline
  BgmvPlan cpu = g.prepare_cpu(options);
  cpu.run(nullptr);
  const std::vector<float> want_y = fetch_y(cpu.y_accum());
  const std::vector<uint16_t> want_s = fetch_u16(cpu.shrink_out());
  BgmvPlan cpu_default = g.prepare_cpu();
  std::vector<float> default_y;
  if (cpu_default.grouped()) {
    cpu_default.run(nullptr);
    default_y = fetch_y(cpu_default.y_accum());
  }
  BgmvPlan generic = prepare_forced(g, 0, -1, options);
  ASSERT_EQ(generic.variant(), "generic") << label;
  ASSERT_FALSE(generic.grouped()) << label;
  poison_and_run(generic, nullptr);
  EXPECT_TRUE(bitwise_equal(fetch_y(generic.y_accum()), want_y, h)) << label << ": generic y";
  generic.close();
  for (int schedule = 0; schedule < 3; ++schedule) {
    const std::string at = label + " schedule " + std::to_string(schedule);
    BgmvPlan plan = prepare_forced(g, 1, schedule, options);
    ASSERT_EQ(plan.backend_used(), "cake") << at;
    ASSERT_EQ(plan.variant(), "specialized") << at;
    ASSERT_EQ(plan.schedule_id(), schedule) << at;
    ASSERT_EQ(plan.pdl_mode(), 0) << at;
    ASSERT_FALSE(plan.shrink_launch().has_value()) << at;
    for (int i = 0; i < kReplays; ++i) {
      poison_and_run(plan, nullptr);
      const std::vector<float> y = fetch_y(plan.y_accum());
      ASSERT_TRUE(bitwise_equal(y, want_y, h)) << at << ": y, replay " << i;
      ASSERT_TRUE(bitwise_equal(fetch_u16(plan.shrink_out()), want_s, r))
          << at << ": shrink_out, replay " << i;
      if (i == 0 && schedule == 0) {
        expect_close_to_oracle(g.host, y, at);
        if (!default_y.empty()) {
          EXPECT_TRUE(allclose(y, default_y, 1e-5, h)) << at << ": vs the grouped default";
        }
      }
    }
    plan.close();
  }
}

/// T in {1, 4, 8, 32, 256, 1024, 2048} x k in {2, 8} x {bf16, fp16} for one hidden size; pair
/// orders rotate, and every other case gets padding pairs (token -1 and token T).
void run_matrix(int64_t hidden, uint64_t seed) {
  int index = 0;
  for (int64_t t : {1, 4, 8, 32, 256, 1024, 2048}) {
    for (int64_t k : {2, 8}) {
      for (DType dtype : {DType::kBF16, DType::kFP16}) {
        const PairOrder order = static_cast<PairOrder>(index % 3);
        Case c = bgmv_test::make_case(special_spec(dtype, hidden, t, k, order, seed + index));
        if (index % 2 == 1) {
          c.add_pair(-1, 0, 0.0f);
          c.add_pair(t, 0, 0.0f);
        }
        ++index;
        GpuCase g(c);
        check_specialized(g, describe(c));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(BgmvSpecializedGpu, MatrixH2688BitwiseVsCpu) {
  CAKEMOE_REQUIRE_SPECIALIZED(2688);
  run_matrix(2688, 3100);
}

TEST(BgmvSpecializedGpu, MatrixH3072BitwiseVsCpu) {
  CAKEMOE_REQUIRE_SPECIALIZED(3072);
  run_matrix(3072, 3200);
}

// Tokens without LoRA (one, then all), an extra route (P != k T: route-index path), 20 routes a
// token (more than 16 published: the serial scan), padding ids -7 and T.
TEST(BgmvSpecializedGpu, SmallPaddingNoLoraExtraAndScannedRoutes) {
  CAKEMOE_REQUIRE_SPECIALIZED(2688);
  CAKEMOE_REQUIRE_SPECIALIZED(3072);
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    const Case c =
        case_with_edge_routes(special_spec(dtype, 2688, 6, 2, PairOrder::kSlotMajor, 3300));
    GpuCase padded(c);
    check_specialized(padded, "padding/no-LoRA/extra " + describe(c));

    Case scan =
        bgmv_test::make_case(special_spec(dtype, 3072, 16, 20, PairOrder::kSlotMajor, 3301));
    GpuCase scanned(scan);
    check_specialized(scanned, "k=20 scan " + describe(scan));

    Case none = bgmv_test::make_case(special_spec(dtype, 3072, 4, 2, PairOrder::kTokenMajor, 3302));
    for (int64_t& l : none.lora_indices) l = -1;
    GpuCase g_none(none);
    BgmvPlan plan = prepare_forced(g_none, 1, 2);
    for (int i = 0; i < kReplays; ++i) {
      poison_and_run(plan, nullptr);
      for (float v : fetch_y(plan.y_accum())) ASSERT_EQ(formats::float_to_bits(v), 0u);
      for (uint16_t v : fetch_u16(plan.shrink_out())) ASSERT_EQ(v, 0u);
    }
  }
}

// y_accum as a column slice of a wider NaN buffer: only the view is written, every replay and
// schedule (H 2688 at 256 columns per CTA has a partial last column block).
TEST(BgmvSpecializedGpu, SmallColumnSliceKeepsNanCanaries) {
  for (int64_t h : {2688, 3072}) {
    CAKEMOE_REQUIRE_SPECIALIZED(h);
    GpuCase g(bgmv_test::make_case(
        special_spec(DType::kBF16, h, 5, 2, PairOrder::kTokenMajor, 3400 + h)));
    const CanaryY y(g.host.spec.tokens, h);
    BgmvOptions o;
    o.y_accum = y.view();
    check_specialized(g, "column slice H=" + std::to_string(h), o);
    ASSERT_TRUE(y.canaries_intact()) << "H=" << h;
  }
}

// Replays read current contents (spec §8): routes, LoRA indices and x change through the same
// pointers; the specialized plan follows, bitwise with the CPU plan each time.
TEST(BgmvSpecializedGpu, ContentsChangeBetweenReplays) {
  CAKEMOE_REQUIRE_SPECIALIZED(3072);
  CaseSpec s = special_spec(DType::kFP16, 3072, 40, 2, PairOrder::kTokenMajor, 3500);
  s.nan_unused_blocks = false;
  GpuCase g(bgmv_test::make_case(s));
  BgmvPlan plan = prepare_forced(g, 1, 1);
  BgmvPlan cpu = g.prepare_cpu();
  expect_follows_changing_contents(g, plan, cpu, kReplays);
}

// The §3.3 header after 4 runs (word0 = 4, word1 = 1) and the split tickets back at 0 (P 8:
// 3 hidden splits), as for the generic per-route pipeline.
TEST(BgmvSpecializedGpu, SmallRouteIndexHeaderAfterFourRuns) {
  CAKEMOE_REQUIRE_SPECIALIZED(2688);
  GpuCase g(
      bgmv_test::make_case(special_spec(DType::kBF16, 2688, 4, 2, PairOrder::kSlotMajor, 3600)));
  BgmvPlan plan = prepare_forced(g, 1, 0);
  for (int i = 0; i < 4; ++i) plan.run(nullptr);
  core::cuda_stream_sync(nullptr);
  const Tensor words = gpu_testbed::to_host(plan.route_index());
  const int32_t* w = words.ptr<int32_t>();
  EXPECT_EQ(w[0], 4);
  EXPECT_EQ(w[1], 1);
  const bgmv::RouteIndexLayout layout = bgmv::route_index_layout(g.host.spec.tokens);
  for (int64_t i = 0; i < 8 * 4; ++i) {
    EXPECT_EQ(w[layout.split_counters + i], 0) << "split ticket " << i << " not reset";
  }
}

// spec §8 outer capture: both kernels are enqueued into the caller's graph, which replays
// bitwise; the plan's own graph still replays afterwards.
TEST(BgmvSpecializedGpu, OuterCaptureReplays) {
  CAKEMOE_REQUIRE_SPECIALIZED(3072);
  GpuCase g(
      bgmv_test::make_case(special_spec(DType::kBF16, 3072, 32, 2, PairOrder::kSlotMajor, 3700)));
  BgmvPlan gpu = prepare_forced(g, 1, 2);
  expect_outer_capture_replays(g, gpu, kReplays);
}

// On the H200 the measured SM90 windows pick the specialized variant for T 64, k 2 (P 128);
// forcing outside the specialized shapes raises InvalidArgument("variant").
TEST(BgmvSpecializedGpu, SmallDefaultAndRefusals) {
  CAKEMOE_REQUIRE_SPECIALIZED(3072);
  GpuCase g(
      bgmv_test::make_case(special_spec(DType::kBF16, 3072, 64, 2, PairOrder::kTokenMajor, 3800)));
  if (core::cuda_capability(0) == 90) {
    EXPECT_EQ(g.prepare_gpu().variant(), "specialized");
  }
  CaseSpec other = special_spec(DType::kBF16, 2048, 4, 2, PairOrder::kTokenMajor, 3801);
  GpuCase o(bgmv_test::make_case(other));
  try {
    prepare_forced(o, 1, -1);
    ADD_FAILURE() << "expected InvalidArgument(variant) for hidden 2048";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "variant");
  }
  BgmvOptions grouped;
  grouped.grouped = true;
  try {
    prepare_forced(g, 1, -1, grouped);
    ADD_FAILURE() << "expected InvalidArgument(grouped)";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "grouped");
  }
}

}  // namespace
}  // namespace bgmv_gpu
}  // namespace cakemoe
