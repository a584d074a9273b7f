// BGMV prepared plans on the GPU through the public API (spec bgmv §8, §9, §11): the Cake path
// bitwise against the CPU backend's canonical order on the same inputs (and the fp64 oracle at
// 1e-2), replays, variants, padding, column slices, graph semantics, the portable fallback.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "bgmv/plan_impl.h"
#include "bgmv/warnings.h"
#include "bgmv/gpu/bgmv_plan_gpu.h"

namespace cakemoe {
namespace bgmv_gpu {
namespace {

CaseSpec spec_of(int64_t hidden, int64_t rank, int64_t tokens, DType dtype, PairOrder order,
                 int64_t top_k, uint64_t seed) {
  return gpu_spec(dtype, hidden, rank, tokens, top_k, order, 2, 128, seed);
}

/// Runs the GPU plan `replays` times (each bitwise equal to the first) and checks y and
/// shrink_out bitwise against the CPU plan of the same inputs and y against the oracle.
void check_against_cpu(GpuCase& g, const BgmvOptions& options, int replays,
                       const std::string& label) {
  int64_t active = 0;
  for (int64_t t = 0; t < g.host.spec.tokens; ++t) active += g.host.active(t) ? 1 : 0;
  ASSERT_GT(active, 0) << label << ": no token with a LoRA and a route (vacuous case)";
  BgmvPlan gpu = g.prepare_gpu(options);
  BgmvPlan cpu = g.prepare_cpu(options);
  ASSERT_EQ(gpu.backend_used(), "cake") << label;
  // NOTE: H 2688 / 3072 at rank 32 may take the specialized variant (SM90 windows): same bits.
  ASSERT_EQ(gpu.variant(), cpu.variant()) << label;
  ASSERT_NE(gpu.variant(), "portable") << label;
  ASSERT_EQ(gpu.grouped(), cpu.grouped()) << label;
  ASSERT_EQ(gpu.shrink_launch().has_value(), cpu.shrink_launch().has_value()) << label;
  if (gpu.shrink_launch()) {
    ASSERT_EQ(gpu.shrink_launch()->splits, cpu.shrink_launch()->splits) << label;
  }
  const int64_t h = g.host.spec.hidden, r = g.host.spec.rank;
  std::vector<float> first;
  for (int i = 0; i < replays; ++i) {
    gpu.run(nullptr);
    const std::vector<float> y = fetch_y(gpu.y_accum());
    if (i == 0) {
      first = y;
    } else {
      ASSERT_TRUE(bitwise_equal(y, first, h)) << label << ": replay " << i << " vs run 0";
    }
  }
  cpu.run(nullptr);
  const std::vector<float> want = fetch_y(cpu.y_accum());
  EXPECT_TRUE(matches_cpu(gpu, first, want, h)) << label << ": y vs CPU canonical order";
  EXPECT_TRUE(bitwise_equal(fetch_u16(gpu.shrink_out()), fetch_u16(cpu.shrink_out()), r))
      << label << ": shrink_out vs CPU canonical order";
  expect_close_to_oracle(g.host, first, label);
  // Replays read current contents (spec §8).
  g.scale_x(0.5f);
  gpu.run(nullptr);
  cpu.run(nullptr);
  EXPECT_TRUE(matches_cpu(gpu, fetch_y(gpu.y_accum()), fetch_y(cpu.y_accum()), h))
      << label << ": after x *= 0.5";
}

TEST(BgmvPlanGpu, GenericMatrixBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  struct Row {
    int64_t h, r, t;
    DType dtype;
    bool arbitrary;
    int64_t k;
  };
  const DType bf = DType::kBF16, fp = DType::kFP16;
  // spec §11.2 generic matrix.
  const Row rows[] = {
      {3072, 16, 8, bf, false, 2},  {3072, 8, 40, fp, false, 2},  {3072, 64, 4, bf, true, 2},
      {2048, 32, 32, fp, false, 2}, {736, 32, 16, bf, false, 2},  {1344, 32, 512, bf, false, 2},
      {2880, 32, 1, fp, false, 2},  {2112, 64, 300, bf, true, 2}, {1472, 8, 64, fp, true, 2},
      {4096, 32, 8, bf, true, 4},   {1856, 16, 96, fp, true, 8},  {2048, 8, 24, bf, true, 20},
      {7168, 64, 16, fp, false, 2}, {7168, 8, 4, bf, true, 2},    {5888, 32, 4, bf, false, 2},
      {4096, 32, 16, fp, true, 2}};
  uint64_t seed = 100;
  for (const Row& row : rows) {
    const CaseSpec s =
        spec_of(row.h, row.r, row.t, row.dtype,
                row.arbitrary ? PairOrder::kSlotMajor : PairOrder::kTokenMajor, row.k, ++seed);
    GpuCase g(bgmv_test::make_case(s));
    check_against_cpu(g, BgmvOptions(), 3, describe(s));
  }
}

TEST(BgmvPlanGpu, ExpertSortedBitwiseVsCpu) {
  CAKEMOE_REQUIRE_GPU();
  struct Row {
    int64_t h, t;
    DType dtype;
    int64_t k;
  };
  const Row rows[] = {{3072, 4, DType::kBF16, 2},
                      {3072, 1024, DType::kBF16, 2},
                      {2688, 1024, DType::kFP16, 2},
                      {2048, 512, DType::kFP16, 2},
                      {1344, 64, DType::kBF16, 4}};
  uint64_t seed = 200;
  for (const Row& row : rows) {
    const CaseSpec s =
        spec_of(row.h, 32, row.t, row.dtype, PairOrder::kExpertSorted, row.k, ++seed);
    GpuCase g(bgmv_test::make_case(s));
    check_against_cpu(g, BgmvOptions(), 3, describe(s));
  }
}

// >= 8 bitwise replays per variant (spec §3.5), each equal to the CPU canonical order.
struct VariantRow {
  const char* name;
  int64_t h, r, t, k;
  PairOrder order;
  std::optional<bool> grouped, remap;
};

void check_variant(const VariantRow& v, DType dtype, uint64_t seed) {
  CaseSpec s = spec_of(v.h, v.r, v.t, dtype, v.order, v.k, seed);
  GpuCase g(bgmv_test::make_case(s));
  BgmvOptions o;
  o.grouped = v.grouped;
  o.order_remap = v.remap;
  check_against_cpu(g, o, 8, std::string(v.name) + " " + describe(s));
}

TEST(BgmvPlanGpu, SmallReplaysPerVariant) {
  CAKEMOE_REQUIRE_GPU();
  const VariantRow rows[] = {
      {"contiguous", 1024, 16, 8, 2, PairOrder::kTokenMajor, false, false},
      {"slot-major", 1024, 16, 8, 2, PairOrder::kSlotMajor, false, false},
      {"expert-sorted", 1024, 32, 8, 2, PairOrder::kExpertSorted, false, false},
      {"k=20 scan", 512, 8, 4, 20, PairOrder::kSlotMajor, false, false},
      {"split-hidden", 4096, 16, 4, 2, PairOrder::kTokenMajor, false, false},
      {"grouped", 768, 16, 8, 4, PairOrder::kSlotMajor, true, std::nullopt},
      {"remap", 1024, 8, 8, 2, PairOrder::kExpertSorted, false, true}};
  uint64_t seed = 300;
  for (const VariantRow& v : rows) {
    check_variant(v, DType::kBF16, ++seed);
    check_variant(v, DType::kFP16, ++seed);
  }
}

TEST(BgmvPlanGpu, ReplaysPerVariantLarge) {
  CAKEMOE_REQUIRE_GPU();
  const VariantRow rows[] = {
      {"contiguous", 3072, 32, 256, 2, PairOrder::kTokenMajor, false, false},
      {"slot-major", 2688, 32, 64, 6, PairOrder::kSlotMajor, false, false},
      {"expert-sorted", 3072, 32, 1024, 2, PairOrder::kExpertSorted, false, false},
      {"k=20 scan", 2048, 8, 24, 20, PairOrder::kSlotMajor, false, false},
      {"split-hidden", 7168, 16, 16, 2, PairOrder::kTokenMajor, false, false},
      {"grouped", 2048, 64, 1024, 2, PairOrder::kTokenMajor, std::nullopt, std::nullopt},
      {"grouped k=20", 736, 32, 40, 20, PairOrder::kSlotMajor, true, std::nullopt},
      {"remap", 7168, 16, 512, 2, PairOrder::kTokenMajor, false, true}};
  uint64_t seed = 400;
  for (const VariantRow& v : rows) check_variant(v, DType::kBF16, ++seed);
}

// spec §5: grouped shrink rows bitwise equal to the per-route pipeline, y within atol=rtol=1e-5.
TEST(BgmvPlanGpu, GroupedMatchesPerRoute) {
  CAKEMOE_REQUIRE_GPU();
  struct Row {
    int64_t h, r, t;
    DType dtype;
    PairOrder order;
    int64_t k;
  };
  const Row rows[] = {{768, 8, 256, DType::kBF16, PairOrder::kTokenMajor, 2},
                      {2048, 64, 192, DType::kBF16, PairOrder::kTokenMajor, 2},
                      {1344, 16, 160, DType::kFP16, PairOrder::kSlotMajor, 2},
                      {4096, 32, 300, DType::kBF16, PairOrder::kExpertSorted, 2},
                      {736, 32, 40, DType::kFP16, PairOrder::kSlotMajor, 20},
                      {2112, 64, 64, DType::kFP16, PairOrder::kExpertSorted, 4}};
  uint64_t seed = 500;
  for (const Row& row : rows) {
    const CaseSpec s = spec_of(row.h, row.r, row.t, row.dtype, row.order, row.k, ++seed);
    GpuCase g(bgmv_test::make_case(s));
    BgmvOptions on, off;
    on.grouped = true;
    off.grouped = false;
    BgmvPlan grouped = g.prepare_gpu(on), per_route = g.prepare_gpu(off);
    ASSERT_TRUE(grouped.grouped());
    ASSERT_FALSE(per_route.grouped());
    grouped.run(nullptr);
    per_route.run(nullptr);
    EXPECT_TRUE(
        bitwise_equal(fetch_u16(grouped.shrink_out()), fetch_u16(per_route.shrink_out()), row.r))
        << describe(s);
    EXPECT_TRUE(allclose(fetch_y(grouped.y_accum()), fetch_y(per_route.y_accum()), 1e-5, row.h))
        << describe(s);
  }
}

// spec §6: the remap permutes CTAs only: bitwise equal to identity dispatch; the order
// workspace is a permutation with the valid pairs sorted by bin.
TEST(BgmvPlanGpu, OrderRemapBitwiseIdentity) {
  CAKEMOE_REQUIRE_GPU();
  struct Row {
    int64_t h, r, t;
    DType dtype;
    PairOrder order;
  };
  const Row rows[] = {{7168, 16, 512, DType::kBF16, PairOrder::kTokenMajor},
                      {4096, 64, 512, DType::kBF16, PairOrder::kSlotMajor},
                      {2944, 32, 1024, DType::kFP16, PairOrder::kExpertSorted},
                      {3072, 8, 128, DType::kBF16, PairOrder::kSlotMajor}};
  uint64_t seed = 600;
  for (const Row& row : rows) {
    const CaseSpec s = spec_of(row.h, row.r, row.t, row.dtype, row.order, 2, ++seed);
    GpuCase g(bgmv_test::make_case(s));
    BgmvOptions on, off;
    on.order_remap = true;
    off.order_remap = false;
    on.grouped = false;  // the remap applies to the per-route pipeline only
    off.grouped = false;
    auto remap = bgmv::detail::prepare_impl(g.x, g.views(g.a), g.views(g.b), g.sorted, g.experts,
                                            g.loras, g.weights, s.experts, on);
    BgmvPlan identity = g.prepare_gpu(off);
    ASSERT_TRUE(remap->choice.order_remap);
    remap->run(nullptr);
    identity.run(nullptr);
    EXPECT_TRUE(bitwise_equal(fetch_y(remap->y_accum), fetch_y(identity.y_accum()), row.h))
        << describe(s);
    EXPECT_TRUE(
        bitwise_equal(fetch_u16(remap->shrink_out), fetch_u16(identity.shrink_out()), row.r))
        << describe(s);
    core::cuda_stream_sync(nullptr);
    const Tensor order = gpu_testbed::to_host(remap->order_workspace);
    const int32_t* o = order.ptr<int32_t>();
    const int64_t pairs = g.host.num_pairs();
    std::vector<int32_t> sorted(o, o + pairs);
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < pairs; ++i) ASSERT_EQ(sorted[i], i) << "not a permutation";
    const auto bin = [&](int32_t p) {
      const int64_t t = g.host.sorted_token_ids[p];
      const int64_t l = (t >= 0 && t < s.tokens) ? g.host.lora_indices[t] : -1;
      return l < 0 ? s.loras * s.experts : l * s.experts + g.host.expert_ids[p];
    };
    for (int64_t i = 1; i < pairs; ++i) {
      ASSERT_TRUE(bin(o[i - 1]) < bin(o[i]) || (bin(o[i - 1]) == bin(o[i]) && o[i - 1] < o[i]))
          << "order not stable by bin at " << i;
    }
  }
}

}  // namespace
}  // namespace bgmv_gpu
}  // namespace cakemoe
