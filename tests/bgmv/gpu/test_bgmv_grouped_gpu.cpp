// The grouped pipeline's GPU forms (docs/decisions/bgmv-gpu-runtime.md): one-CTA index vs hist /
// scan / scatter, the shrink's staging forms (A and x in shared memory, A alone, none, chosen by
// H), packed or plain sorted_routes, the SIMT expand (ranks 8 / 16) and the tensor-core expand
// (ranks 32 / 64). Every form must give the CPU reference's grouped order (bit for bit, or within
// 1e-5 with tensor cores), the same bits over >= 8 poisoned replays, and shrink rows bitwise
// equal to the CPU's. Forms a default plan takes only at other sizes are forced through
// PlanOverrides (docs/decisions/bgmv-overrides.md).
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bgmv/gpu/bgmv_plan_gpu.h"
#include "bgmv/grouped_launch.h"
#include "bgmv/plan.h"
#include "bgmv/plan_impl.h"

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

/// A grouped plan of `g` with `overrides`, its index form set by `index` (-1 picked, 0 hist /
/// scan / scatter, 1 the one-CTA index).
BgmvPlan prepare_grouped(const GpuCase& g, int index, bgmv::PlanOverrides overrides = {}) {
  BgmvOptions o;
  o.grouped = true;
  if (index >= 0) overrides.fused_index = index == 1;
  return BgmvPlan(bgmv::detail::prepare_impl(g.x, g.views(g.a), g.views(g.b), g.sorted, g.experts,
                                             g.loras, g.weights, g.host.spec.experts, o,
                                             overrides));
}

/// Each index form of `row` against the CPU grouped order (matches_cpu: bitwise, or within 1e-5 for
/// a tensor-core expand). `all_bitwise`, when given, is cleared if a form's y is not the CPU's
/// bits.
void check_forms(const GroupedRow& row, uint64_t seed, const std::vector<int>& indexes,
                 bool* all_bitwise = nullptr, const bgmv::PlanOverrides& overrides = {}) {
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
    BgmvPlan gpu = prepare_grouped(g, index, overrides);
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

/// check_forms over `rows` (seeds seed + 1, ...) with `overrides`.
void check_rows_with(const bgmv::PlanOverrides& overrides, const std::vector<GroupedRow>& rows,
                     uint64_t seed, const std::vector<int>& indexes) {
  for (const GroupedRow& row : rows) check_forms(row, ++seed, indexes, nullptr, overrides);
}

bgmv::PlanOverrides staged(int stage) {
  bgmv::PlanOverrides o;
  o.grouped_stage = stage;
  return o;
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

// sorted_routes with pair ids alone (the form of plans past 65536 pairs or 32768 tokens, forced
// here): the same bits as the packed entries every other grouped test runs with.
TEST(BgmvGroupedGpu, UnpackedRoutesBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  bgmv::PlanOverrides unpacked;
  unpacked.packed_routes = false;
  const std::vector<GroupedRow> rows = {
      {736, 32, 24, 20, 2, 32, DType::kBF16, PairOrder::kSlotMajor},
      {2688, 16, 300, 8, 4, 64, DType::kFP16, PairOrder::kExpertSorted}};
  uint64_t seed = 5700;
  check_rows_with(unpacked, rows, seed, {0, 1});
  seed += rows.size();
  bgmv::PlanOverrides unpacked_unstaged = unpacked;
  unpacked_unstaged.grouped_stage = bgmv::kGroupStageNone;
  check_rows_with(unpacked_unstaged, {rows[1]}, seed, {1});
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

// Which expand a grouped plan runs: tensor cores at ranks 32 and 64, the SIMT expand at ranks 8 /
// 16; never on the CPU engine.
TEST(BgmvGroupedGpu, GroupedMmaIsReported) {
  CAKEMOE_REQUIRE_GPU();
  const auto row = [](int64_t h, int64_t r) {
    return GroupedRow{h, r, 256, 2, 2, 32, DType::kBF16, PairOrder::kTokenMajor};
  };
  GpuCase r32(bgmv_test::make_case(grouped_spec(row(3072, 32), 5601)));
  GpuCase r64(bgmv_test::make_case(grouped_spec(row(2688, 64), 5602)));
  GpuCase r16(bgmv_test::make_case(grouped_spec(row(4096, 16), 5603)));
  GpuCase r8(bgmv_test::make_case(grouped_spec(row(3072, 8), 5604)));
  EXPECT_TRUE(prepare_grouped(r32, 1).grouped_mma());
  BgmvPlan rank64 = prepare_grouped(r64, 1);
  EXPECT_TRUE(rank64.grouped_mma());
  EXPECT_FALSE(prepare_grouped(r16, 1).grouped_mma());
  EXPECT_FALSE(prepare_grouped(r8, 0).grouped_mma());
  BgmvOptions cpu_options;
  cpu_options.grouped = true;
  EXPECT_FALSE(r32.prepare_cpu(cpu_options).grouped_mma());
}

// Stage 2 (A and x staged) forced at ranks 16 and 64.
TEST(BgmvGroupedGpu, StageTwoAtRanks16And64) {
  CAKEMOE_REQUIRE_GPU();
  check_rows_with(staged(bgmv::kGroupStageAX),
                  {{2688, 16, 300, 8, 4, 64, DType::kFP16, PairOrder::kExpertSorted},
                   {3072, 64, 256, 6, 2, 128, DType::kBF16, PairOrder::kSlotMajor}},
                  5400, {1});
}

// The expand's tile slots: empty bins' slots (P far below the bin count, first-wave and later
// CTAs), bins cut into several tiles (64 routes per bin), a tile count that is not a multiple of
// the SIMT expand's 2 tiles per CTA, ranks 8-64 (SIMT at 8 / 16, tensor cores at 32 / 64) and
// both dtypes; the 1024-bin and rank-64 rows again at rank 16 so the SIMT expand meets them too.
TEST(BgmvGroupedGpu, ExpandTileSlotsVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const GroupedRow rows[] = {
      {3072, 32, 512, 2, 8, 128, DType::kBF16, PairOrder::kTokenMajor},  // 1024 bins, P 1024
      {3072, 16, 512, 2, 8, 128, DType::kBF16, PairOrder::kTokenMajor},
      {1344, 16, 512, 2, 2, 8, DType::kFP16, PairOrder::kSlotMajor},  // 64 routes per bin
      {2112, 64, 48, 4, 3, 8, DType::kFP16, PairOrder::kExpertSorted},
      {2112, 16, 48, 4, 3, 8, DType::kFP16, PairOrder::kExpertSorted},
      {768, 8, 200, 3, 5, 7, DType::kBF16, PairOrder::kTokenMajor}};  // 35 bins
  uint64_t seed = 7100;
  for (const GroupedRow& row : rows) check_forms(row, ++seed, {1});
}

// The expand's column blocks with A staged alone: a last column block of fewer than 128 columns
// (H 744: 232, a partly live warp of the SIMT expand's two-column threads) and of 128-256 (H
// 2688: 128; H 1344: 64; H 1000: 232; H 2112: 64), > 16 routes per token and both dtypes.
TEST(BgmvGroupedGpu, ExpandColumnBlocksVsCpu) {
  CAKEMOE_REQUIRE_GPU();
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
  check_rows_with(staged(bgmv::kGroupStageA), rows, 7500, {1, 0});
}

// The sanitizer-sized cut of the test above (compute-sanitizer runs the `Small` tests): the
// rank-16 two-column CTAs at 8 per SM and rank-64 tensor-core tiles on small grids, so racecheck
// finishes (the full test above did not in 230 s).
TEST(BgmvGroupedGpu, SmallExpandColumnBlocksVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  const std::vector<GroupedRow> rows = {
      {744, 64, 24, 2, 2, 8, DType::kBF16, PairOrder::kTokenMajor},
      {520, 64, 20, 4, 3, 4, DType::kFP16, PairOrder::kExpertSorted},
      {744, 16, 24, 6, 2, 8, DType::kBF16, PairOrder::kSlotMajor}};
  check_rows_with(staged(bgmv::kGroupStageA), rows, 7600, {1, 0});
}

// The tensor-core grouped expand (ranks 32 and 64): the shrink rows bitwise equal to the CPU
// grouped order, y within 1e-5 of it (relative to the largest |y|: the tensor core adds a route's
// rank products in its own order), replays bitwise identical. The rows cover a last column block
// of 128 columns (H 2688: two warps without fragments), 8-column tails (H 520, H 744), fp16, > 16
// routes per token and tiles of 1-16 routes; the rank-16 row runs the SIMT expand beside them.
TEST(BgmvGroupedGpu, SmallMmaExpandWithinToleranceOfCpu) {
  CAKEMOE_REQUIRE_GPU();
  const std::vector<GroupedRow> rows = {
      {2688, 32, 64, 2, 4, 16, DType::kBF16, PairOrder::kTokenMajor},
      {520, 32, 40, 6, 3, 8, DType::kFP16, PairOrder::kExpertSorted},
      {744, 16, 24, 20, 2, 32, DType::kBF16, PairOrder::kSlotMajor},
      {1344, 64, 30, 4, 2, 8, DType::kBF16, PairOrder::kTokenMajor},
      {1000, 64, 20, 2, 2, 4, DType::kFP16, PairOrder::kSlotMajor}};
  bool all_bitwise = true;  // false: the tensor-core path ran (the CPU order is not its order)
  uint64_t seed = 7700;
  for (const GroupedRow& row : rows) {
    check_forms(row, ++seed, {1}, &all_bitwise, staged(bgmv::kGroupStageA));
  }
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
