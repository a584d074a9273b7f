// Host selectors of spec bgmv §4.1, §4.4, §5, §6, §7, the §9 support set and workspace sizes.
// Every example the spec lists as test-asserted is reproduced here.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "bgmv/grouped_launch.h"
#include "bgmv/plan.h"
#include "cakemoe/errors.h"

namespace cakemoe {
namespace bgmv {
namespace {

void expect_shrink(int64_t p, int64_t r, int64_t h, Arch arch, int form, int splits) {
  const ShrinkLaunch s = select_generic_shrink(p, r, h, arch);
  EXPECT_EQ(shrink_form_number(s.kind), form)
      << "P=" << p << " R=" << r << " H=" << h << " " << arch_name(arch);
  EXPECT_EQ(s.splits, splits) << "P=" << p << " R=" << r << " H=" << h << " " << arch_name(arch);
}

TEST(BgmvPlanSelectors, ShrinkLaunchSpecExamples) {
  // spec §4.1, sm90a.
  expect_shrink(32, 32, 7168, Arch::kSm90a, 2, 1);
  expect_shrink(32, 8, 7168, Arch::kSm90a, 2, 4);
  expect_shrink(8, 32, 5888, Arch::kSm90a, 2, 4);
  expect_shrink(8, 64, 736, Arch::kSm90a, 2, 1);
  expect_shrink(8192, 32, 3072, Arch::kSm90a, 0, 1);
  expect_shrink(65, 64, 7168, Arch::kSm90a, 0, 1);
  expect_shrink(256, 16, 4096, Arch::kSm90a, 2, 1);
  expect_shrink(512, 16, 4096, Arch::kSm90a, 0, 1);
  // Blackwell.
  expect_shrink(128, 64, 7168, Arch::kSm100a, 2, 1);
  expect_shrink(129, 64, 7168, Arch::kSm100a, 0, 1);
  expect_shrink(512, 16, 3072, Arch::kSm100a, 0, 1);
}

TEST(BgmvPlanSelectors, ShrinkLaunchDeepRingBoundaries) {
  expect_shrink(128, 64, 7168, Arch::kSm103a, 2, 1);
  expect_shrink(1024, 8, 5888, Arch::kSm103a, 2, 1);
  expect_shrink(1025, 8, 7168, Arch::kSm103a, 0, 1);
  expect_shrink(1024, 8, 2048, Arch::kSm103a, 0, 1);
  expect_shrink(128, 64, 7168, Arch::kSm90a, 0, 1);  // SM90 keeps the 512-CTA rule
  expect_shrink(512, 8, 768, Arch::kSm90a, 2, 1);
  // Splits: bounded by the tile count, 8, and P <= 128.
  expect_shrink(1, 8, 16384, Arch::kSm90a, 2, 8);
  expect_shrink(1, 8, 3000, Arch::kSm90a, 2, 3);
  expect_shrink(129, 8, 16384, Arch::kSm90a, 2, 1);
  EXPECT_THROW(select_generic_shrink(0, 32, 3072, Arch::kSm90a), InvalidArgument);
  EXPECT_THROW(select_generic_shrink(8, 24, 3072, Arch::kSm90a), InvalidArgument);
}

TEST(BgmvPlanSelectors, PdlModeSpecExamples) {
  EXPECT_EQ(select_pdl_mode(Variant::kGeneric, 16, 2944, Arch::kSm90a, 132), 1);
  EXPECT_EQ(select_pdl_mode(Variant::kGeneric, 128, 1472, Arch::kSm90a, 132), 1);
  EXPECT_EQ(select_pdl_mode(Variant::kGeneric, 512, 736, Arch::kSm90a, 132), 0);
  EXPECT_EQ(select_pdl_mode(Variant::kGeneric, 128, 1472, Arch::kSm100a, 148), 2);
  // H200: early while T * ceil(H / 128) <= 1584.
  EXPECT_EQ(select_pdl_mode(Variant::kGeneric, 66, 3072, Arch::kSm90a, 132), 1);  // 1584
  EXPECT_EQ(select_pdl_mode(Variant::kGeneric, 67, 3072, Arch::kSm90a, 132), 0);  // 1608
  EXPECT_EQ(select_pdl_mode(Variant::kGeneric, 8, 3072, Arch::kSm100a, 148), 1);
  EXPECT_EQ(select_pdl_mode(Variant::kSpecialized, 8, 3072, Arch::kSm100a, 148), 0);
  EXPECT_EQ(select_pdl_mode(Variant::kGeneric, 8, 3072, Arch::kOther, 100), 0);
}

TEST(BgmvPlanSelectors, LaunchPdlModeEarlyOnSm90Only) {
  // SM90 (measured): early at every size, also where §4.4 reports plain launches.
  EXPECT_EQ(select_launch_pdl_mode(67, 3072, Arch::kSm90a, 132), 1);
  EXPECT_EQ(select_launch_pdl_mode(512, 736, Arch::kSm90a, 132), 1);
  EXPECT_EQ(select_launch_pdl_mode(8, 3072, Arch::kSm90a, 132), 1);
  // Unmeasured targets keep §4.4's generic rule.
  EXPECT_EQ(select_launch_pdl_mode(128, 1472, Arch::kSm100a, 148), 2);
  EXPECT_EQ(select_launch_pdl_mode(8, 3072, Arch::kSm100a, 148), 1);
  EXPECT_EQ(select_launch_pdl_mode(8, 3072, Arch::kOther, 100), 0);
}

TEST(BgmvPlanSelectors, GroupedSpecExamples) {
  EXPECT_TRUE(select_grouped(8192, 4096, 8, 128, 4096, 32));
  EXPECT_TRUE(select_grouped(4096, 2048, 8, 128, 3072, 32));
  EXPECT_FALSE(select_grouped(2048, 1024, 8, 128, 3072, 32));
  EXPECT_TRUE(select_grouped(2048, 1024, 4, 128, 4096, 64));
  EXPECT_FALSE(select_grouped(2048, 1024, 4, 128, 4096, 32));
  EXPECT_FALSE(select_grouped(8192, 4096, 64, 128, 4096, 32));  // 8192 bins
  EXPECT_FALSE(select_grouped(8192, 4096, 8, 128, 768, 8));
  EXPECT_TRUE(select_grouped(8192, 4096, 8, 128, 768, 16));
  EXPECT_FALSE(select_grouped(8192, 4096, 8, 128, 512, 16));
  // More rows of the FlashInfer selector test.
  EXPECT_FALSE(select_grouped(3072, 1536, 4, 128, 7168, 8));
  EXPECT_TRUE(select_grouped(4096, 2048, 4, 128, 7168, 8));
  EXPECT_FALSE(select_grouped(1024, 512, 8, 128, 4096, 32));
  EXPECT_FALSE(select_grouped(8192, 4096, 0, 128, 4096, 32));
  EXPECT_TRUE(select_grouped(8192, 4096, 8, 128, 2048, 8));
  EXPECT_TRUE(select_grouped(8192, 4096, 8, 128, 768, 32));
  // spec §11.2 auto-selection: (H=2048, R=64, T=1024) grouped; R=16 T=1024 not; R=16 T=2048 yes.
  EXPECT_TRUE(select_grouped(2048, 1024, 2, 128, 2048, 64));
  EXPECT_FALSE(select_grouped(2048, 1024, 2, 128, 2048, 16));
  EXPECT_TRUE(select_grouped(4096, 2048, 2, 128, 2048, 16));
}

TEST(BgmvPlanSelectors, OrderRemapSpecExamples) {
  const Arch h = Arch::kSm90a;
  EXPECT_TRUE(select_order_remap(1024, 512, 8, 128, 7168, 64, h));
  EXPECT_TRUE(select_order_remap(1024, 512, 8, 128, 7168, 16, h));
  EXPECT_FALSE(select_order_remap(1024, 512, 8, 128, 3072, 32, h));
  EXPECT_FALSE(select_order_remap(1024, 512, 8, 128, 2048, 64, h));
  EXPECT_TRUE(select_order_remap(1024, 512, 8, 128, 4096, 64, h));
  EXPECT_TRUE(select_order_remap(1024, 512, 8, 128, 16384, 8, h));
  EXPECT_FALSE(select_order_remap(1024, 512, 8, 128, 8192, 8, h));
  EXPECT_FALSE(select_order_remap(512, 256, 8, 128, 7168, 64, h));
  EXPECT_FALSE(select_order_remap(8192, 4096, 8, 128, 7168, 64, h));
  EXPECT_FALSE(select_order_remap(2048, 1024, 64, 128, 7168, 64, h));  // 8192 bins
  EXPECT_TRUE(select_order_remap(2048, 1024, 8, 128, 7168, 16, h));
  // Non-SM90 never remaps.
  EXPECT_FALSE(select_order_remap(1024, 512, 8, 128, 7168, 64, Arch::kSm100a));
  EXPECT_FALSE(select_order_remap(1024, 512, 8, 128, 7168, 64, Arch::kSm103a));
  // spec §11.2: SM90 picks the remap for (7168, R=64, T=512, k=2).
  EXPECT_TRUE(select_order_remap(1024, 512, 2, 128, 7168, 64, h));
}

TEST(BgmvPlanSelectors, VariantAndSchedules) {
  // SM90: cakemoe's measured windows (T <= 8, or 64 <= P; P <= 1024), see plan.h.
  EXPECT_EQ(select_variant(256, 512, 3072, 32, Arch::kSm90a, true), Variant::kSpecialized);
  EXPECT_EQ(select_variant(1, 2, 2688, 32, Arch::kSm90a, true), Variant::kSpecialized);
  EXPECT_EQ(select_variant(8, 64, 3072, 32, Arch::kSm90a, true), Variant::kSpecialized);
  EXPECT_EQ(select_variant(16, 32, 3072, 32, Arch::kSm90a, true), Variant::kGeneric);
  EXPECT_EQ(select_variant(16, 128, 3072, 32, Arch::kSm90a, true), Variant::kSpecialized);
  EXPECT_EQ(select_variant(512, 1024, 3072, 32, Arch::kSm90a, true), Variant::kSpecialized);
  EXPECT_EQ(select_variant(256, 2048, 3072, 32, Arch::kSm90a, true), Variant::kGeneric);
  EXPECT_EQ(select_variant(256, 512, 4096, 32, Arch::kSm90a, true), Variant::kGeneric);
  EXPECT_EQ(select_variant(256, 512, 3072, 32, Arch::kSm90a, false), Variant::kGeneric);
  EXPECT_EQ(select_variant(256, 512, 3072, 32, Arch::kSm100a, true), Variant::kSpecialized);
  EXPECT_EQ(select_variant(256, 512, 2688, 32, Arch::kSm103a, true), Variant::kSpecialized);
  EXPECT_EQ(select_variant(16, 32, 3072, 32, Arch::kSm100a, true), Variant::kGeneric);
  EXPECT_EQ(select_variant(2048, 4096, 3072, 32, Arch::kSm100a, true), Variant::kGeneric);
  EXPECT_EQ(select_variant(256, 512, 3072, 16, Arch::kSm100a, true), Variant::kGeneric);
  EXPECT_EQ(select_variant(256, 512, 3072, 32, Arch::kSm100a, false), Variant::kGeneric);
  EXPECT_EQ(select_generic_schedule(8), 0);
  EXPECT_EQ(select_generic_schedule(9), 1);
  EXPECT_EQ(select_specialized_schedule(4, 8, 3072, Arch::kSm100a), 0);
  EXPECT_EQ(select_specialized_schedule(512, 1024, 3072, Arch::kSm100a), 2);
  EXPECT_EQ(select_specialized_schedule(1024, 2048, 2688, Arch::kSm100a), 2);
  EXPECT_EQ(select_specialized_schedule(512, 1024, 2688, Arch::kSm100a), 1);
  EXPECT_EQ(select_specialized_schedule(32, 64, 3072, Arch::kSm100a), 1);
  // SM90: the H200's best schedules.
  EXPECT_EQ(select_specialized_schedule(1, 2, 3072, Arch::kSm90a), 1);
  EXPECT_EQ(select_specialized_schedule(4, 32, 3072, Arch::kSm90a), 0);
  EXPECT_EQ(select_specialized_schedule(32, 64, 2688, Arch::kSm90a), 1);
  EXPECT_EQ(select_specialized_schedule(32, 256, 2688, Arch::kSm90a), 0);
  EXPECT_EQ(select_specialized_schedule(64, 128, 3072, Arch::kSm90a), 2);
}

TEST(BgmvPlanSupport, ReasonsInSpecOrder) {
  SupportQuery q;
  q.num_slices = 1;
  q.rank = 32;
  q.hidden = 3072;
  q.feat_out = 3072;
  EXPECT_TRUE(cake_support(q).supported());
  q.capability = Capability{9, 0};
  EXPECT_TRUE(cake_support(q).supported());
  q.capability = Capability{8, 0};
  EXPECT_EQ(cake_support(q).reason,
            "Cake BGMV MoE requires an exact SM90, SM100 or SM103 CUDA device; got "
            "capability=(8, 0)");
  EXPECT_EQ(cake_support(q).argument, "device");
  q.capability = Capability{10, 1};
  EXPECT_FALSE(cake_support(q).supported());
  // SM90 whose driver ignores the native code (CUDA_FORCE_PTX_JIT=1): the portable path.
  q.capability = Capability{9, 0};
  q.native_code_loads = false;
  EXPECT_EQ(cake_support(q).argument, "device");
  EXPECT_NE(cake_support(q).reason.find("does not load"), std::string::npos);
  q.native_code_loads = true;
  q.capability.reset();
  // Every later rule broken at once: the first one in §9 order wins, then the next, ...
  q.num_slices = 2;
  q.rank = 12;
  q.hidden = 2052;
  q.feat_out = 1000;
  EXPECT_EQ(cake_support(q).reason, "Cake BGMV MoE requires exactly one LoRA slice, got 2");
  q.num_slices = 1;
  EXPECT_EQ(cake_support(q).reason, "Cake BGMV MoE requires LoRA rank in (8, 16, 32, 64), got 12");
  q.rank = 64;
  EXPECT_EQ(cake_support(q).reason,
            "Cake BGMV MoE hidden_size must be a positive multiple of 8, got 2052");
  EXPECT_EQ(cake_support(q).argument, "x");
  q.hidden = 2048;
  EXPECT_EQ(cake_support(q).reason,
            "Cake BGMV MoE requires LoRA-B feat_out == hidden_size, got feat_out=1000 for "
            "hidden_size=2048");
  EXPECT_EQ(cake_support(q).argument, "lora_b_weights");
  EXPECT_EQ(fallback_warning("why"),
            "prepare_bgmv_moe: falling back to the portable bgmv_moe_shrink/bgmv_moe_expand path "
            "(why). Pass fallback=false to raise instead.");
}

// cakemoe's grouped GPU geometry (docs/decisions/bgmv-gpu-runtime.md).
TEST(BgmvPlanWorkspaces, GroupedGeometry) {
  const GroupedGeometry a = grouped_geometry(2048, 3072);
  EXPECT_TRUE(a.fused_index);
  // Staged rows are whole k tiles of 1024 elements (grouped_stage_row_bytes).
  EXPECT_EQ(grouped_stage_row_bytes(2688), 6144);
  EXPECT_EQ(grouped_stage_row_bytes(3072), 6144);
  EXPECT_EQ(a.stage, 2);                           // (8 + 4) x 6 KB = 72 KB
  EXPECT_EQ(grouped_geometry(64, 4096).stage, 2);  // 12 x 8 KB = 96 KB
  EXPECT_EQ(grouped_geometry(64, 4104).stage, 1);  // 12 x 10 KB > 100 KB; A alone: 80 KB
  EXPECT_EQ(grouped_geometry(64, 7168).stage, 1);  // 112 KB
  EXPECT_EQ(grouped_geometry(64, 7176).stage, 0);
  // A alone from 6 routes per bin (bins given).
  EXPECT_EQ(grouped_geometry(6143, 3072, -1, 1024).stage, 2);
  EXPECT_EQ(grouped_geometry(6144, 3072, -1, 1024).stage, 1);
  EXPECT_EQ(grouped_geometry(6144, 7176, -1, 1024).stage, 0);
  EXPECT_TRUE(grouped_geometry(16384, 3072).fused_index);
  EXPECT_FALSE(grouped_geometry(16385, 3072).fused_index);
  EXPECT_FALSE(grouped_geometry(2048, 3072, 0).fused_index);
  EXPECT_TRUE(grouped_geometry(64, 3072, 1).fused_index);
  EXPECT_THROW(grouped_geometry(16385, 3072, 1), InvalidArgument);
  EXPECT_EQ(grouped_geometry(2048, 2688, -1, 512).stage, 2);
  EXPECT_EQ(grouped_geometry(2048, 3080, -1, 512).stage, 2);  // 4 k tiles: (8 + 4) x 8 KB
}

TEST(BgmvPlanWorkspaces, RouteIndexAndGroupedSizes) {
  const RouteIndexLayout l = route_index_layout(10);
  EXPECT_EQ(l.count, 4);
  EXPECT_EQ(l.base_even, 14);
  EXPECT_EQ(l.base_odd, 24);
  EXPECT_EQ(l.slots, 34);
  EXPECT_EQ(l.split_partials, 4 + 19 * 10);
  EXPECT_EQ(l.total_words, 4 + 19 * 10 + 8 * 128 * 64 + 128 * 8);
  const GroupedWorkspace g = grouped_workspace(8192, 4096, 8, 128, 3072);
  EXPECT_EQ(g.bins, 1024);
  EXPECT_EQ(g.max_tiles, 1536);
  EXPECT_EQ(g.hist_ctas, 8);
  // spec §5 words, then cakemoe's alignment pad, tile_info[4 max_tiles] and tile_rows (P rows
  // of up to 64 16-bit values).
  EXPECT_EQ(g.int_words,
            4 + 1025 + 1536 + 8192 + 4096 + 4096 * 16 + 2 * 8 * 1024 + 3 + 4 * 1536 + 8192 * 32);
  EXPECT_EQ(g.partial_floats, 8192 * 3072);
  EXPECT_EQ(grouped_workspace(1, 1, 1, 1, 8).hist_ctas, 1);
  EXPECT_EQ(grouped_workspace(1 << 20, 1, 1, 1, 8).hist_ctas, 64);
  EXPECT_EQ(order_workspace_words(3000), 3000);
}

// The grouped expand's shared-memory layout of B (grouped_expand_slot): a permutation of the
// 256 x R/8 vectors, and conflict-free for the kernel's reads (column c = thread, same vector g:
// the 8 columns of one 128-byte LDS.128 wavefront land in 8 different 16-byte bank groups).
template <int kGroups>
void expect_expand_slots_permute_and_spread() {
  std::vector<int> seen(kGroupExpandCols * kGroups, 0);
  for (int c = 0; c < kGroupExpandCols; ++c) {
    for (int g = 0; g < kGroups; ++g) {
      const int slot = grouped_expand_slot<kGroups>(c, g);
      ASSERT_GE(slot, 0);
      ASSERT_LT(slot, kGroupExpandCols * kGroups);
      ++seen[slot];
    }
  }
  for (const int n : seen) EXPECT_EQ(n, 1) << "kGroups " << kGroups;
  for (int c0 = 0; c0 < kGroupExpandCols; c0 += 8) {
    for (int g = 0; g < kGroups; ++g) {
      int banks = 0;  // bit per 16-byte bank group of the 128-byte line
      for (int c = c0; c < c0 + 8; ++c) banks |= 1 << (grouped_expand_slot<kGroups>(c, g) % 8);
      EXPECT_EQ(banks, 0xFF) << "kGroups " << kGroups << " columns " << c0 << ".. vector " << g;
    }
  }
}

TEST(BgmvPlanWorkspaces, GroupedExpandSharedLayout) {
  expect_expand_slots_permute_and_spread<1>();  // rank 8
  expect_expand_slots_permute_and_spread<2>();
  expect_expand_slots_permute_and_spread<4>();
  expect_expand_slots_permute_and_spread<8>();  // rank 64
  EXPECT_EQ(grouped_expand_smem_bytes(32, 2), 2 * 4 * 256 * 16);
  EXPECT_EQ(grouped_expand_smem_bytes(64, 4), 4 * 8 * 256 * 16);
}

ProblemDesc desc(int64_t t, int64_t p, int64_t h, int64_t r, int64_t l, int64_t e) {
  ProblemDesc d;
  d.num_tokens = t;
  d.num_pairs = p;
  d.hidden = h;
  d.rank = r;
  d.num_loras = l;
  d.num_experts = e;
  return d;
}

TEST(BgmvPlanChoice, CakeChoices) {
  // The SM90 register-shrink region: half blocks (64 CTAs of 4 rows), one split (spec §4.1's
  // rule would say (2, 3)).
  PlanChoice c = choose_cake_plan(desc(4, 8, 3072, 32, 2, 128));
  EXPECT_EQ(c.variant, Variant::kGeneric);
  ASSERT_TRUE(c.shrink_launch.has_value());
  EXPECT_EQ(c.shrink_launch->kind, ShrinkKind::kRegistersHalfBlock);
  EXPECT_EQ(c.shrink_launch->splits, 1);
  EXPECT_EQ(select_generic_shrink(8, 32, 3072, Arch::kSm90a).kind, ShrinkKind::kRing3Stage);
  EXPECT_EQ(select_generic_shrink(8, 32, 3072, Arch::kSm90a).splits, 3);
  ProblemDesc blackwell_small = desc(4, 8, 3072, 32, 2, 128);
  blackwell_small.arch = Arch::kSm100a;
  EXPECT_EQ(choose_cake_plan(blackwell_small).shrink_launch->splits, 3);
  EXPECT_FALSE(c.grouped);
  EXPECT_FALSE(c.order_remap);
  EXPECT_EQ(c.pdl_mode, 1);
  EXPECT_EQ(c.schedule_id, 1);  // SM90 decode: wide (plan_generic_schedule)
  // spec §6's rule would remap (SM90, 7168 x 64, T = 512); cakemoe remaps only when forced.
  EXPECT_TRUE(select_order_remap(1024, 512, 2, 128, 7168, 64, Arch::kSm90a));
  c = choose_cake_plan(desc(512, 1024, 7168, 64, 2, 128));
  EXPECT_FALSE(c.order_remap);
  EXPECT_TRUE(c.grouped);  // rank 64: grouped from 1024 pairs at T >= 128
  EXPECT_EQ(c.schedule_id, 1);
  // SM90 grouped crossover (select_grouped_sm90) vs spec §5's rule elsewhere.
  c = choose_cake_plan(desc(1024, 2048, 2048, 64, 2, 128));
  EXPECT_TRUE(c.grouped);
  EXPECT_FALSE(c.order_remap);
  c = choose_cake_plan(desc(512, 1024, 3072, 32, 8, 128));
  EXPECT_TRUE(c.grouped);
  ProblemDesc bw = desc(512, 1024, 3072, 32, 8, 128);
  bw.arch = Arch::kSm100a;
  EXPECT_FALSE(choose_cake_plan(bw).grouped);
  // Forced remap keeps the plan's splits (bitwise equal to identity dispatch) with the 2-stage
  // ring (spec form 0).
  ProblemDesc d = desc(4, 8, 3072, 32, 2, 128);
  d.order_remap = true;
  c = choose_cake_plan(d);
  EXPECT_TRUE(c.order_remap);
  EXPECT_EQ(c.shrink_launch->kind, ShrinkKind::kRing2Stage);
  EXPECT_EQ(c.shrink_launch->splits, 1);
  std::ostringstream os;
  os << c;
  EXPECT_NE(os.str().find("order_remap=1"), std::string::npos);
  // Launch PDL on SM90: early at every size for the per-route pair, §4.4's value for the remap.
  ProblemDesc big = desc(512, 1024, 3072, 32, 2, 128);
  big.grouped = false;
  c = choose_cake_plan(big);
  EXPECT_EQ(c.pdl_mode, 0);  // §4.4 reports plain launches above 12 expand CTAs per SM
  EXPECT_EQ(c.launch_pdl_mode, 1);
  big.order_remap = true;
  c = choose_cake_plan(big);
  EXPECT_EQ(c.launch_pdl_mode, c.pdl_mode);
}

// H200 crossovers (bench/results/2026-11-29_*_bgmv-variants.md).
TEST(BgmvPlanChoice, GroupedSm90Crossover) {
  EXPECT_FALSE(select_grouped_sm90(1023, 512, 8, 128, 32));
  EXPECT_TRUE(select_grouped_sm90(1024, 512, 8, 128, 32));     // T 512 k 2
  // Rank 32 from T 128 since session 16 (tensor-core expand; bench/results/
  // 2026-11-30_671e51c_bgmv-session16.md): T 128 k 8 grouped, T 128 k 6 and T 64 k 16 per-route.
  EXPECT_TRUE(select_grouped_sm90(1024, 128, 8, 128, 32));
  EXPECT_FALSE(select_grouped_sm90(768, 128, 8, 128, 32));
  EXPECT_FALSE(select_grouped_sm90(1024, 64, 8, 128, 32));
  EXPECT_TRUE(select_grouped_sm90(1536, 256, 8, 128, 16));     // T 256 k 6
  EXPECT_FALSE(select_grouped_sm90(1024, 512, 8, 128, 16));    // rank 16 T 512 k 2: per-route
  EXPECT_TRUE(select_grouped_sm90(1024, 512, 8, 128, 8));      // rank 8 keeps the rank-32 rule
  EXPECT_TRUE(select_grouped_sm90(1024, 512, 8, 128, 64));     // rank 64 T 512 k 2
  EXPECT_TRUE(select_grouped_sm90(2048, 256, 8, 128, 64));     // rank 64 T 256 k 8
  EXPECT_TRUE(select_grouped_sm90(1024, 128, 8, 128, 64));     // rank 64 T 128 k 8
  EXPECT_FALSE(select_grouped_sm90(768, 128, 8, 128, 64));     // rank 64 T 128 k 6: per-route
  EXPECT_FALSE(select_grouped_sm90(512, 256, 8, 128, 64));     // rank 64 T 256 k 2: per-route
  EXPECT_FALSE(select_grouped_sm90(1024, 64, 8, 128, 64));     // rank 64 T 64 k 16: per-route
  EXPECT_TRUE(select_grouped_sm90(2048, 1024, 8, 128, 64));    // rank 64 T 1024 k 2
  EXPECT_FALSE(select_grouped_sm90(8192, 4096, 64, 128, 32));  // 8192 bins
  EXPECT_FALSE(select_grouped_sm90(16 * 65536, 1 << 19, 8, 128, 32));
}

TEST(BgmvPlanChoice, ForcedConflictsAndLimits) {
  ProblemDesc d = desc(1024, 2048, 2048, 64, 2, 128);  // grouped by heuristic
  d.order_remap = true;
  try {
    choose_cake_plan(d);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "order_remap");
  }
  d = desc(4, 5000, 3072, 32, 2, 128);
  d.order_remap = true;
  EXPECT_THROW(choose_cake_plan(d), InvalidArgument);  // > 4096 pairs
  d = desc(4, 8, 3072, 32, 64, 128);
  d.grouped = true;
  EXPECT_THROW(choose_cake_plan(d), InvalidArgument);  // 8192 bins
  d.grouped = false;
  EXPECT_NO_THROW(choose_cake_plan(d));
  const PlanChoice p = choose_portable_plan("because");
  EXPECT_EQ(p.variant, Variant::kPortable);
  EXPECT_FALSE(p.schedule_id.has_value());
  EXPECT_FALSE(p.shrink_launch.has_value());
  EXPECT_EQ(p.fallback_reason, "because");
}

}  // namespace
}  // namespace bgmv
}  // namespace cakemoe
