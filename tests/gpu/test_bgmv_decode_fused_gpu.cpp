// The fused decode path on the GPU (one cooperative shrink + expand launch, src/bgmv/
// decode_fused.cuh): y and shrink_out bitwise equal to the CPU canonical order with the plan's
// splits and to the two-kernel path, over >= 8 poisoned replays; routing edge cases, column-slice
// y with NaN canaries, route changes between replays, outer capture, the §3.3 header.

#include <string>
#include <vector>

#include "bgmv/plan.h"
#include "bgmv/plan_impl.h"
#include "cakemoe/errors.h"
#include "gpu/bgmv_plan_gpu.h"

namespace cakemoe {
namespace bgmv_gpu {
namespace {

CaseSpec fused_spec(DType dtype, int64_t hidden, int64_t rank, int64_t tokens, int64_t top_k,
                    PairOrder order, uint64_t seed) {
  return gpu_spec(dtype, hidden, rank, tokens, top_k, order, 2, 16, seed);
}

/// Whether the forced fused path can run this case on device 0 (grid co-resident).
bool fused_fits(const Case& c, int splits) {
  const int blocks =
      bgmv::detail::fused_decode_blocks_per_sm(c.spec.dtype, c.spec.rank, Device::cuda(0));
  return bgmv::fused_decode_fits(c.spec.tokens, c.num_pairs(), c.spec.hidden, c.spec.rank, splits,
                                 core::cuda_sm_count(0), blocks);
}

/// A forced fused plan, `replays` poisoned runs, each bitwise equal (y and shrink_out) to the CPU
/// plan and to the two-kernel GPU plan. `options` may carry y_accum / shrink_out.
void check_fused(GpuCase& g, int replays, const std::string& label,
                 BgmvOptions options = BgmvOptions()) {
  const int64_t h = g.host.spec.hidden, r = g.host.spec.rank;
  BgmvPlan cpu = g.prepare_cpu();
  // NOTE: the CPU default may be the specialized variant (no shrink_launch; same bits, same
  // splits as the generic selector's).
  const int splits =
      bgmv::plan_generic_shrink(g.host.num_pairs(), r, h, bgmv::Arch::kSm90a).splits;
  if (!fused_fits(g.host, splits)) {
    options.fused_decode = true;
    EXPECT_THROW(g.prepare_gpu(options), InvalidArgument) << label << ": grid cannot fit";
    return;
  }
  options.fused_decode = true;
  BgmvPlan fused = g.prepare_gpu(options);
  BgmvOptions off;
  off.fused_decode = false;
  BgmvPlan two = g.prepare_gpu(off);
  ASSERT_TRUE(fused.fused_decode()) << label;
  ASSERT_FALSE(two.fused_decode()) << label;
  ASSERT_EQ(fused.backend_used(), "cake") << label;
  ASSERT_EQ(fused.shrink_launch()->splits, splits) << label;
  cpu.run(nullptr);
  const std::vector<float> want_y = fetch_y(cpu.y_accum());
  const std::vector<uint16_t> want_s = fetch_u16(cpu.shrink_out());
  poison_and_run(two, nullptr);
  EXPECT_TRUE(bitwise_equal(fetch_y(two.y_accum()), want_y, h)) << label << ": two-kernel y";
  for (int i = 0; i < replays; ++i) {
    poison_and_run(fused, nullptr);
    const std::vector<float> y = fetch_y(fused.y_accum());
    ASSERT_TRUE(bitwise_equal(y, want_y, h)) << label << ": fused y, replay " << i;
    ASSERT_TRUE(bitwise_equal(fetch_u16(fused.shrink_out()), want_s, r))
        << label << ": fused shrink_out, replay " << i;
    if (i == 0) expect_close_to_oracle(g.host, y, label);
  }
}

// T in {1, 2, 4, 8} x k in {1, 2, 6, 8} x R in {8, 16, 32, 64}, bf16 and fp16 alternating;
// H 3072 (3 tiles: splits 3 at tiny P, 1 at large P) and 2048 for rank 64 (so T 8 k 8 fits).
TEST(BgmvDecodeFusedGpu, MatrixBitwiseVsCpuAndTwoKernel) {
  CAKEMOE_REQUIRE_GPU();
  uint64_t seed = 900;
  int index = 0;
  for (int64_t t : {1, 2, 4, 8}) {
    for (int64_t k : {1, 2, 6, 8}) {
      for (int64_t r : {8, 16, 32, 64}) {
        const DType dtype = (index++ % 2 == 0) ? DType::kBF16 : DType::kFP16;
        const PairOrder order =
            t > 1 && index % 3 == 0 ? PairOrder::kSlotMajor : PairOrder::kTokenMajor;
        GpuCase g(
            bgmv_test::make_case(fused_spec(dtype, r == 64 ? 2048 : 3072, r, t, k, order, ++seed)));
        check_fused(g, 8, describe(g.host));
      }
    }
  }
}

// Masked K tail (H % 1024 != 0), partial expand CTA (H % 128 != 0), uneven and empty splits
// (H 4104: 5 tiles; P 8 at rank 32 gives 4 splits of 2, 2, 1, 0 tiles), expert-sorted order.
TEST(BgmvDecodeFusedGpu, TailsUnevenSplitsExpertSorted) {
  CAKEMOE_REQUIRE_GPU();
  struct Row {
    int64_t h, r, t, k;
    DType dtype;
    PairOrder order;
  };
  const Row rows[] = {{1000, 16, 3, 2, DType::kBF16, PairOrder::kTokenMajor},
                      {4104, 32, 4, 2, DType::kFP16, PairOrder::kTokenMajor},
                      {4104, 8, 1, 1, DType::kBF16, PairOrder::kTokenMajor},
                      {2056, 64, 2, 6, DType::kFP16, PairOrder::kExpertSorted},
                      {7168, 32, 8, 2, DType::kBF16, PairOrder::kExpertSorted},
                      {8, 8, 5, 2, DType::kFP16, PairOrder::kSlotMajor}};
  uint64_t seed = 950;
  for (const Row& row : rows) {
    GpuCase g(
        bgmv_test::make_case(fused_spec(row.dtype, row.h, row.r, row.t, row.k, row.order, ++seed)));
    check_fused(g, 8, describe(g.host));
  }
}

// Padding pairs (token -1 and token T), tokens without LoRA, an extra route, every token
// without LoRA, P up to the hard limit 128.
TEST(BgmvDecodeFusedGpu, PaddingNoLoraExtraRoutesAndMaxPairs) {
  CAKEMOE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    const Case c =
        case_with_edge_routes(fused_spec(dtype, 3072, 32, 6, 2, PairOrder::kSlotMajor, 970));
    GpuCase padded(c);
    check_fused(padded, 8, "padding/no-LoRA/extra " + describe(c));

    // Every token without LoRA: y = 0 and shrink_out = 0 everywhere (the CPU says so too).
    Case none =
        bgmv_test::make_case(fused_spec(dtype, 1024, 16, 4, 2, PairOrder::kTokenMajor, 971));
    for (int64_t& l : none.lora_indices) l = -1;
    GpuCase g_none(none);
    BgmvOptions o;
    o.fused_decode = true;
    BgmvPlan plan = g_none.prepare_gpu(o);
    for (int i = 0; i < 8; ++i) {
      poison_and_run(plan, nullptr);
      for (float v : fetch_y(plan.y_accum())) ASSERT_EQ(formats::float_to_bits(v), 0u);
      for (uint16_t v : fetch_u16(plan.shrink_out())) ASSERT_EQ(v, 0u);
    }

    // P = 128 (8 tokens x 16 routes) at rank 8: the scan's hard limit.
    GpuCase wide(
        bgmv_test::make_case(fused_spec(dtype, 1024, 8, 8, 16, PairOrder::kSlotMajor, 972)));
    check_fused(wide, 8, "P=128 " + describe(wide.host));
  }
}

// y_accum as a column slice of a wider NaN buffer: only the view is written, every replay.
TEST(BgmvDecodeFusedGpu, ColumnSliceKeepsNanCanaries) {
  CAKEMOE_REQUIRE_GPU();
  for (int64_t r : {8, 64}) {
    GpuCase g(bgmv_test::make_case(
        fused_spec(DType::kBF16, 2048, r, 4, 2, PairOrder::kTokenMajor, 980 + r)));
    const CanaryY y(g.host.spec.tokens, g.host.spec.hidden);
    BgmvOptions o;
    o.y_accum = y.view();
    check_fused(g, 8, "column slice R=" + std::to_string(r), o);
    ASSERT_TRUE(y.canaries_intact()) << "R=" << r;
  }
}

// Replays read current contents (spec §8): routes, LoRA indices and x change between replays
// through the same pointers; the fused plan follows, bitwise with the CPU plan each time.
TEST(BgmvDecodeFusedGpu, RoutesChangeBetweenReplays) {
  CAKEMOE_REQUIRE_GPU();
  CaseSpec s = fused_spec(DType::kBF16, 3072, 32, 4, 2, PairOrder::kTokenMajor, 990);
  s.nan_unused_blocks = false;
  GpuCase g(bgmv_test::make_case(s));
  BgmvOptions o;
  o.fused_decode = true;
  BgmvPlan fused = g.prepare_gpu(o);
  BgmvPlan cpu = g.prepare_cpu();
  ASSERT_TRUE(fused.fused_decode());
  expect_follows_changing_contents(g, fused, cpu, 8);
}

// The fused path keeps the §3.3 header like the per-route pipeline (word0 = runs, word1 =
// parity of the last run) and leaves its counters at 0 (self-reset, replayable graph).
TEST(BgmvDecodeFusedGpu, RouteIndexHeaderAndCountersAfterRuns) {
  CAKEMOE_REQUIRE_GPU();
  GpuCase g(
      bgmv_test::make_case(fused_spec(DType::kFP16, 3072, 16, 2, 2, PairOrder::kTokenMajor, 995)));
  BgmvOptions o;
  o.fused_decode = true;
  BgmvPlan plan = g.prepare_gpu(o);
  for (int i = 0; i < 5; ++i) plan.run(nullptr);
  core::cuda_stream_sync(nullptr);
  const Tensor words = gpu_testbed::to_host(plan.route_index());
  const int32_t* w = words.ptr<int32_t>();
  EXPECT_EQ(w[0], 5);
  EXPECT_EQ(w[1], 0);
  const bgmv::RouteIndexLayout layout = bgmv::route_index_layout(g.host.spec.tokens);
  EXPECT_EQ(w[layout.split_counters], 0) << "arrival counter not reset";
  EXPECT_EQ(w[layout.split_counters + 1], 0) << "pass counter not reset";
}

// spec §8 outer capture: the cooperative launch is enqueued into the caller's graph, which
// replays bitwise; the plan's own graph still replays afterwards.
TEST(BgmvDecodeFusedGpu, OuterCaptureReplays) {
  CAKEMOE_REQUIRE_GPU();
  GpuCase g(
      bgmv_test::make_case(fused_spec(DType::kBF16, 3072, 32, 1, 2, PairOrder::kTokenMajor, 996)));
  BgmvOptions o;
  o.fused_decode = true;
  BgmvPlan gpu = g.prepare_gpu(o);
  expect_outer_capture_replays(g, gpu, 8);
}

// The heuristic on the H200: tiny batches take the fused path by default, T 16 does not
// (H 4096: H 2688 / 3072 at rank 32 take the specialized variant there instead).
TEST(BgmvDecodeFusedGpu, DefaultChoiceOnSm90) {
  CAKEMOE_REQUIRE_GPU();
  if (core::cuda_capability(0) != 90) GTEST_SKIP() << "the decode defaults are SM90's";
  // The fused decode is opt-in: the default is the two-kernel plan everywhere.
  GpuCase r16(
      bgmv_test::make_case(fused_spec(DType::kBF16, 4096, 16, 8, 6, PairOrder::kTokenMajor, 996)));
  EXPECT_FALSE(r16.prepare_gpu().fused_decode());
  BgmvOptions on;
  on.fused_decode = true;
  EXPECT_TRUE(r16.prepare_gpu(on).fused_decode());
  // The register-shrink region (P 2): form 3 with one split, the wide expand schedule.
  GpuCase tiny(
      bgmv_test::make_case(fused_spec(DType::kBF16, 4096, 32, 1, 2, PairOrder::kTokenMajor, 997)));
  const BgmvPlan plan = tiny.prepare_gpu();
  EXPECT_FALSE(plan.fused_decode());
  ASSERT_TRUE(plan.shrink_launch().has_value());
  EXPECT_EQ(plan.shrink_launch()->form, 3);
  EXPECT_EQ(plan.shrink_launch()->splits, 1);
  EXPECT_EQ(plan.schedule_id(), 1);
}

}  // namespace
}  // namespace bgmv_gpu
}  // namespace cakemoe
