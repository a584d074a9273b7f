// The grouped pipeline's GPU forms (docs/decisions/bgmv-gpu-runtime.md): one-CTA index vs hist /
// scan / scatter, and the shrink's staging forms (A and x in shared memory, A alone, none, chosen
// by H). Every form must give the CPU reference's grouped order bit for bit, over >= 8 poisoned
// replays, with the shrink rows bitwise equal to the CPU's.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bgmv/plan.h"
#include "bgmv/plan_impl.h"
#include "bgmv/gpu/bgmv_plan_gpu.h"

namespace cakemoe {
namespace bgmv_gpu {
namespace {

struct GroupedRow {
  int64_t h, r, t, k, loras, experts;
  DType dtype;
  PairOrder order;
};

CaseSpec grouped_spec(const GroupedRow& row, uint64_t seed) {
  return gpu_spec(row.dtype, row.h, row.r, row.t, row.k, row.order, row.loras, row.experts, seed);
}

BgmvPlan prepare_grouped(const GpuCase& g, int index) {
  BgmvOptions o;
  o.grouped = true;
  bgmv::detail::PrepareInternals internals;
  internals.grouped_index = index;
  return BgmvPlan(bgmv::detail::prepare_impl(g.x, g.views(g.a), g.views(g.b), g.sorted, g.experts,
                                             g.loras, g.weights, g.host.spec.experts, o,
                                             internals));
}

/// Each index form of `row` against the CPU grouped order (matches_cpu: bitwise, or within 1e-5 for
/// a tensor-core expand). `all_bitwise`, when given, is cleared if a form's y is not the CPU's
/// bits.
void check_forms(const GroupedRow& row, uint64_t seed, const std::vector<int>& indexes,
                 bool* all_bitwise = nullptr) {
  GpuCase g(bgmv_test::make_case(grouped_spec(row, seed)));
  BgmvOptions cpu_options;
  cpu_options.grouped = true;
  BgmvPlan cpu = g.prepare_cpu(cpu_options);
  ASSERT_TRUE(cpu.grouped());
  cpu.run(nullptr);
  const std::vector<float> want = fetch_y(cpu.y_accum());
  const std::vector<uint16_t> want_rows = fetch_u16(cpu.shrink_out());
  for (const int index : indexes) {
    const std::string label = describe(g.host.spec) + " index=" + std::to_string(index);
    BgmvPlan gpu = prepare_grouped(g, index);
    ASSERT_TRUE(gpu.grouped()) << label;
    std::vector<float> first;
    for (int i = 0; i < 8; ++i) {
      poison_and_run(gpu, nullptr);  // y and shrink rows 0xFF before every run
      const std::vector<float> y = fetch_y(gpu.y_accum());
      if (i == 0) {
        first = y;
        EXPECT_TRUE(matches_cpu(gpu, y, want, g.host.spec.hidden)) << label << ": y vs CPU grouped";
        if (all_bitwise != nullptr && !bitwise_equal(y, want, g.host.spec.hidden)) {
          *all_bitwise = false;
        }
        EXPECT_TRUE(bitwise_equal(fetch_u16(gpu.shrink_out()), want_rows, g.host.spec.rank))
            << label << ": shrink rows vs CPU";
      } else {
        ASSERT_TRUE(bitwise_equal(y, first, g.host.spec.hidden)) << label << ": replay " << i;
      }
    }
    expect_close_to_oracle(g.host, first, label);
  }
}

/// check_forms over `rows` (seeds seed + 1, ...) with the A/B switch `name` set to `value`.
void check_rows_under(const char* name, const char* value, const std::vector<GroupedRow>& rows,
                      uint64_t seed, const std::vector<int>& indexes) {
  const testbed::ScopedEnv env(name, value);
  for (const GroupedRow& row : rows) check_forms(row, ++seed, indexes);
}

TEST(BgmvGroupedGpu, SmallFormsBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const std::vector<int> indexes = {0, 1};
  const GroupedRow rows[] = {
      {768, 8, 64, 2, 2, 8, DType::kBF16, PairOrder::kTokenMajor},
      {1344, 16, 40, 6, 2, 16, DType::kFP16, PairOrder::kSlotMajor},
      {736, 32, 24, 20, 2, 32, DType::kBF16, PairOrder::kSlotMajor},  // > 16 routes: scan
      {2112, 64, 48, 4, 3, 8, DType::kFP16, PairOrder::kExpertSorted},
      {4096, 8, 16, 2, 2, 8, DType::kBF16, PairOrder::kTokenMajor},  // P 32: 4 hidden splits
      // the one-CTA index at 8 and 16 pairs per thread (P 4800, 8800)
      {768, 8, 600, 8, 2, 16, DType::kFP16, PairOrder::kSlotMajor},
      {512, 16, 1100, 8, 2, 16, DType::kBF16, PairOrder::kTokenMajor}};
  uint64_t seed = 900;
  for (const GroupedRow& row : rows) check_forms(row, ++seed, indexes);
}

TEST(BgmvGroupedGpu, FormsBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const std::vector<int> indexes = {0, 1};
  const GroupedRow rows[] = {
      {3072, 32, 512, 2, 8, 128, DType::kBF16, PairOrder::kTokenMajor},
      {2688, 16, 300, 8, 4, 64, DType::kFP16, PairOrder::kExpertSorted},
      {4096, 64, 256, 6, 2, 128, DType::kBF16, PairOrder::kSlotMajor},
      {5120, 16, 96, 2, 2, 16, DType::kFP16, PairOrder::kTokenMajor},  // stage 1: A alone
      {7176, 8, 64, 2, 2, 8, DType::kBF16, PairOrder::kTokenMajor}};   // stage 0
  uint64_t seed = 950;
  for (const GroupedRow& row : rows) check_forms(row, ++seed, indexes);
}

// sorted_routes with pair ids alone (CAKEMOE_BGMV_PACKED_ROUTES=0, the form of plans past 65536
// pairs): the same bits as the packed entries every other grouped test runs with.
TEST(BgmvGroupedGpu, UnpackedRoutesBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const testbed::ScopedEnv packed_env("CAKEMOE_BGMV_PACKED_ROUTES", "0");
  const std::vector<GroupedRow> rows = {
      {736, 32, 24, 20, 2, 32, DType::kBF16, PairOrder::kSlotMajor},
      {2688, 16, 300, 8, 4, 64, DType::kFP16, PairOrder::kExpertSorted}};
  uint64_t seed = 5700;
  for (const GroupedRow& row : rows) check_forms(row, ++seed, {0, 1});
  check_rows_under("CAKEMOE_BGMV_GROUPED_STAGE", "0", {rows[1]}, seed, {1});
}

// Edge geometries on the default forms (the rows the fused stage was tested on until session 19
// deleted it): expand column blocks that are not multiples of 8 (H 744, H 40: one partial
// 256-column block), a rank-16 plan of 1024 routes, rank 8 at H 3072 and a T 512 rank-32 plan
// with 8 LoRAs x 128 experts.
TEST(BgmvGroupedGpu, EdgeGeometriesBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const std::vector<GroupedRow> rows = {
      {744, 32, 30, 3, 2, 4, DType::kFP16, PairOrder::kTokenMajor},
      {40, 64, 20, 2, 2, 4, DType::kBF16, PairOrder::kSlotMajor},
      {1344, 16, 512, 2, 2, 8, DType::kFP16, PairOrder::kSlotMajor},
      {3072, 8, 64, 2, 2, 8, DType::kBF16, PairOrder::kTokenMajor},
      {3072, 32, 512, 2, 8, 128, DType::kBF16, PairOrder::kTokenMajor}};
  uint64_t seed = 5300;
  for (const GroupedRow& row : rows) check_forms(row, ++seed, {1});
}

// Which expand a grouped plan runs: tensor cores by default at ranks 32 and 64, the SIMT expand
// at ranks 8 / 16 and when CAKEMOE_BGMV_EXPAND_MMA=0; never on the CPU engine.
TEST(BgmvGroupedGpu, GroupedMmaIsReported) {
  CAKEMOE_REQUIRE_GPU();
  const auto row = [](int64_t h, int64_t r) {
    return GroupedRow{h, r, 256, 2, 2, 32, DType::kBF16, PairOrder::kTokenMajor};
  };
  GpuCase r32(bgmv_test::make_case(grouped_spec(row(3072, 32), 5601)));
  GpuCase r64(bgmv_test::make_case(grouped_spec(row(2688, 64), 5602)));
  GpuCase r16(bgmv_test::make_case(grouped_spec(row(4096, 16), 5603)));
  EXPECT_TRUE(prepare_grouped(r32, 1).grouped_mma());
  BgmvPlan rank64 = prepare_grouped(r64, 1);
  EXPECT_TRUE(rank64.grouped_mma());
  EXPECT_FALSE(prepare_grouped(r16, 1).grouped_mma());
  BgmvOptions cpu_options;
  cpu_options.grouped = true;
  EXPECT_FALSE(r32.prepare_cpu(cpu_options).grouped_mma());
  const testbed::ScopedEnv mma_env("CAKEMOE_BGMV_EXPAND_MMA", "0");
  EXPECT_FALSE(prepare_grouped(r32, 1).grouped_mma());
}

// Stage 2 (A and x staged) forced at ranks 16 and 64.
TEST(BgmvGroupedGpu, StageTwoAtRanks16And64) {
  CAKEMOE_REQUIRE_GPU();
  const testbed::ScopedEnv stage_env("CAKEMOE_BGMV_GROUPED_STAGE", "2");
  const GroupedRow rows[] = {{2688, 16, 300, 8, 4, 64, DType::kFP16, PairOrder::kExpertSorted},
                             {3072, 64, 256, 6, 2, 128, DType::kBF16, PairOrder::kSlotMajor}};
  uint64_t seed = 5400;
  for (const GroupedRow& row : rows) check_forms(row, ++seed, {1});
}

// The SIMT grouped expand with 1, 2 and 4 tiles per CTA (CAKEMOE_BGMV_EXPAND_TILES; the
// tensor-core expand, the default at ranks 32 / 64, is switched off): the same bits.
// The rows cover empty bins' tile slots (P far below the bin count, first-wave and later CTAs),
// bins cut into several tiles (64 routes per bin), a tile count that is not a multiple of 4,
// ranks 8-64 and both dtypes.
TEST(BgmvGroupedGpu, ExpandTilesBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const testbed::ScopedEnv mma_env("CAKEMOE_BGMV_EXPAND_MMA", "0");
  const GroupedRow rows[] = {
      {3072, 32, 512, 2, 8, 128, DType::kBF16, PairOrder::kTokenMajor},  // 1024 bins, P 1024
      {1344, 16, 512, 2, 2, 8, DType::kFP16, PairOrder::kSlotMajor},     // 64 routes per bin
      {2112, 64, 48, 4, 3, 8, DType::kFP16, PairOrder::kExpertSorted},
      {768, 8, 200, 3, 5, 7, DType::kBF16, PairOrder::kTokenMajor}};  // 35 bins
  for (const char* tiles : {"1", "2", "4"}) {
    const testbed::ScopedEnv env("CAKEMOE_BGMV_EXPAND_TILES", tiles);
    SCOPED_TRACE(std::string("expand tiles ") + tiles);
    uint64_t seed = 7100;
    for (const GroupedRow& row : rows) check_forms(row, ++seed, {1});
  }
}

// The one-CTA index with sorted_routes stored scattered (CAKEMOE_BGMV_INDEX_SMEM_SCATTER=0)
// instead of through shared memory: the same bits.
TEST(BgmvGroupedGpu, IndexScatteredStoresBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  check_rows_under("CAKEMOE_BGMV_INDEX_SMEM_SCATTER", "0",
                   {{1344, 16, 40, 6, 2, 16, DType::kFP16, PairOrder::kSlotMajor},
                    {768, 8, 600, 8, 2, 16, DType::kFP16, PairOrder::kSlotMajor}},
                   7400, {1});
}

// The SIMT grouped expand (CAKEMOE_BGMV_EXPAND_MMA=0) with one and two columns per thread
// (CAKEMOE_BGMV_EXPAND_COLS=1 / 2; two is the default at ranks 8-32 with 2 tiles per CTA, and at
// rank 64 "2" gives a column pair to a thread pair): the same bits. The rows cover a last column
// block of fewer than 128 columns (H 744: 232, a partly live warp) and of 128-256 (H 2688: 128;
// H 1344: 64; H 1000: 232; H 2112: 64), > 16 routes per token and both dtypes.
TEST(BgmvGroupedGpu, ExpandTwoColumnsBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const testbed::ScopedEnv stage_env("CAKEMOE_BGMV_GROUPED_STAGE", "1");  // A staged alone
  const testbed::ScopedEnv mma_env("CAKEMOE_BGMV_EXPAND_MMA", "0");       // the SIMT expand
  const std::vector<GroupedRow> rows = {
      {3072, 32, 512, 2, 8, 128, DType::kBF16, PairOrder::kTokenMajor},
      {2688, 32, 300, 2, 4, 64, DType::kFP16, PairOrder::kExpertSorted},
      {744, 16, 200, 6, 2, 16, DType::kBF16, PairOrder::kSlotMajor},
      {1344, 16, 512, 2, 2, 8, DType::kFP16, PairOrder::kSlotMajor},
      {736, 32, 24, 20, 2, 32, DType::kBF16, PairOrder::kSlotMajor},
      {1000, 8, 200, 3, 5, 7, DType::kBF16, PairOrder::kTokenMajor},
      {4096, 64, 256, 6, 2, 128, DType::kBF16, PairOrder::kSlotMajor},
      {2112, 64, 96, 4, 3, 8, DType::kFP16, PairOrder::kExpertSorted},
      {744, 64, 60, 2, 2, 8, DType::kBF16, PairOrder::kTokenMajor}};
  for (const char* cols : {"1", "2"}) {
    SCOPED_TRACE(std::string("CAKEMOE_BGMV_EXPAND_COLS=") + cols);
    check_rows_under("CAKEMOE_BGMV_EXPAND_COLS", cols, rows, 7500, {1, 0});
  }
}

// The sanitizer-sized cut of the test above (compute-sanitizer runs the `Small` tests): the
// rank-64 column pair per thread pair and the rank-16 two-column CTAs at 8 per SM, forced on
// small grids so racecheck finishes (the full test above did not in 230 s).
TEST(BgmvGroupedGpu, SmallExpandColumnPairsBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const testbed::ScopedEnv stage_env("CAKEMOE_BGMV_GROUPED_STAGE", "1");
  const testbed::ScopedEnv mma_env("CAKEMOE_BGMV_EXPAND_MMA", "0");
  const std::vector<GroupedRow> rows = {
      {744, 64, 24, 2, 2, 8, DType::kBF16, PairOrder::kTokenMajor},
      {520, 64, 20, 4, 3, 4, DType::kFP16, PairOrder::kExpertSorted},
      {744, 16, 24, 6, 2, 8, DType::kBF16, PairOrder::kSlotMajor}};
  check_rows_under("CAKEMOE_BGMV_EXPAND_COLS", "2", rows, 7600, {1, 0});
}

// The tensor-core grouped expand (CAKEMOE_BGMV_EXPAND_MMA=1, ranks 16-64): the shrink rows
// bitwise equal to the CPU grouped order, y within 1e-5 of it (relative to the largest |y|: the
// tensor core adds a route's rank products in its own order), replays bitwise identical. The
// rows cover a last column block of 128 columns (H 2688: two warps without fragments), 8-column
// tails (H 520, H 744), fp16, > 16 routes per token and tiles of 1-16 routes.
TEST(BgmvGroupedGpu, SmallMmaExpandWithinToleranceOfCpu) {
  CAKEMOE_REQUIRE_GPU();
  const testbed::ScopedEnv stage_env("CAKEMOE_BGMV_GROUPED_STAGE", "1");
  const testbed::ScopedEnv mma_env("CAKEMOE_BGMV_EXPAND_MMA", "1");
  const std::vector<GroupedRow> rows = {
      {2688, 32, 64, 2, 4, 16, DType::kBF16, PairOrder::kTokenMajor},
      {520, 32, 40, 6, 3, 8, DType::kFP16, PairOrder::kExpertSorted},
      {744, 16, 24, 20, 2, 32, DType::kBF16, PairOrder::kSlotMajor},
      {1344, 64, 30, 4, 2, 8, DType::kBF16, PairOrder::kTokenMajor},
      {1000, 64, 20, 2, 2, 4, DType::kFP16, PairOrder::kSlotMajor}};
  bool all_bitwise = true;  // false: the tensor-core path ran (the CPU order is not its order)
  uint64_t seed = 7700;
  for (const GroupedRow& row : rows) check_forms(row, ++seed, {1}, &all_bitwise);
  EXPECT_FALSE(all_bitwise) << "every y equal to the CPU order: was the mma path taken?";
}

// P > 16384: the hist / scan / scatter index is the only form.
TEST(BgmvGroupedGpu, ManyPairsUseTheMultiCtaIndex) {
  CAKEMOE_REQUIRE_GPU();
  const GroupedRow row = {512, 8, 4200, 4, 4, 64, DType::kBF16, PairOrder::kExpertSorted};
  const bgmv::GroupedGeometry geo = bgmv::grouped_geometry(4200 * 4, 512);
  ASSERT_FALSE(geo.fused_index);
  check_forms(row, 990, {-1});
}

}  // namespace
}  // namespace bgmv_gpu
}  // namespace cakemoe
