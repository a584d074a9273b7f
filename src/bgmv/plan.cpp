#include "bgmv/plan.h"

#include <algorithm>
#include <array>
#include <ostream>
#include <sstream>

#include "bgmv/grouped_launch.h"
#include "core/check.h"
#include "core/checked.h"

namespace cakemoe {
namespace bgmv {
namespace {

// spec §4.1 shrink geometry.
constexpr int64_t kShrinkTile = 1024;
constexpr int64_t kRankTile = 8;
constexpr int64_t kSplitMax = 8;
constexpr int64_t kSplitMaxPairs = 128;
constexpr int64_t kSplitTargetCtas = 128;
constexpr int64_t kDeepRingMaxCtas = 512;
constexpr int64_t kDeepRingBlackwellMaxCtas = 1024;
constexpr int64_t kDeepRingBlackwellMinHidden = 4096;
constexpr int kFormPrefill = 0;
constexpr int kFormPrefillDeep = 2;
constexpr int kFormRegisters = 3;         // x and A of 4 k tiles per trip in registers, no ring
constexpr int kFormRegistersOne = 4;      // one k tile per trip: few registers, many CTAs per SM
constexpr int kFormRegistersHalf = 5;     // form 3 over 4 rank rows: twice the CTAs, one split
constexpr int kFormRegistersQuarter = 6;  // form 3 over 2 rank rows: 4x the CTAs, one split
// SM90 decode region of the register form (H200 table with forced launches,
// bench/results/2026-11-30_*_bgmv-decode.md): form 3 with one split beats the rings with splits,
// the fused decode and the specialized body from T 1 up to these sizes. P 48 (T 8, k 6, rank 16:
// 96 CTAs) was 0.87-0.91x of the ring with 2 splits (2026-11-30 session 7); P 64 at rank 16 (128
// CTAs) was 1.06-1.26x, so the CTA bound stays.
constexpr int64_t kRegisterShrinkMaxPairs = 48;
constexpr int64_t kRegisterShrinkMaxCtas = 96;
constexpr int64_t kRegisterShrinkRank32MinHidden = 4096;
// SM90: from this many shrink CTAs (P * R / 8) form 4 beat every other form at every measured
// rank and H (H200 session 9, call 1: 0.87-1.01 of the plan's form at 384-4096 CTAs, rank 16
// T 256 / 512 k 2 0.87-0.88; 1.01-1.23 below 384, where fewer, fatter CTAs keep more in flight).
constexpr int64_t kRegisterOneMinCtas = 384;
// Forms 6 / 5 inside the register region while their CTAs (P * R / 2, P * R / 4) stay <= 64 (H200
// session 10: form 5 0.93-0.99 of form 3 at 8-64 CTAs, 1.05-1.16 at 96-192 where CTAs share SMs;
// form 6 0.94-0.99 of form 5 at 16-64 CTAs, 1.07-1.15 at 128).
constexpr int64_t kRegisterSplitRowsMaxCtas = 64;
// Generic expand schedule 2 (decode): 128 threads, one (column, lane) slot each, 8 routes a batch.
constexpr int kScheduleDecode = 2;
constexpr int64_t kDecodeScheduleMaxTokens = 4;
constexpr int64_t kDecodeScheduleMaxPairs = 256;  // the expand's pre-wait route scan (kScanPairs)

// spec §4.4 PDL: expand CTAs per SM that still count as a "small" grid, at 128 columns per CTA.
constexpr int64_t kPdlExpandCols = 128;
constexpr int64_t kPdlSmallPerSmHopper = 12;
constexpr int64_t kPdlSmallPerSmBlackwell = 8;

// spec §5 grouped pipeline.
constexpr int64_t kGroupBinsMax = 4096;
constexpr int64_t kGroupHeaderWords = 4;
constexpr int64_t kGroupHistPairsPerCta = 256 * 4;
constexpr int64_t kGroupHistCtasMax = 64;
constexpr int64_t kGroupedMinPairs = 2048;
constexpr int64_t kGroupedMinPairsSub64 = 4096;
constexpr int64_t kGroupedMinRoutesPerBin = 4;
constexpr int64_t kGroupedMinWeightElems = 12288;
// NOTE: spec §5 prints 6144 plus a "P < 8192" rank-8 rule, but its asserted example
// (8192, 768, rank 8) -> False needs the 16384 floor; see docs/decisions/bgmv.md.
constexpr int64_t kGroupedMinWeightElemsSub16 = 16384;
constexpr int64_t kGroupedMaxTileRows = 65536;
// Grouped GPU geometry (kernel limits from grouped_launch.h).
// Staged rows are whole k tiles (grouped_stage_row_bytes).
constexpr int64_t kGroupStageXMaxBytes = 100 * 1024;  // A + 4 x rows: H <= 4096, >= 2 CTAs/SM
constexpr int64_t kGroupStageAMaxBytes = 112 * 1024;  // A alone: H <= 7168
// From this many routes per bin (2+ parts per tile) A alone wins: a 4th CTA per SM beats staging
// the first part's x (bench/results/2026-11-29_*_bgmv-grouped-stage.md: 2-5 % at k 6 / 8, T >=
// 1024; A and x win by 1-3 % at 2-4 routes per bin).
constexpr int64_t kGroupStageAMinRoutesPerBin = 6;
constexpr int64_t kGroupAlignPadWords = 3;      // tile_info starts 16-byte aligned
constexpr int64_t kGroupTileRowWords = 64 / 2;  // tile_rows: rank <= 64 16-bit values

// cakemoe's SM90 grouped crossover (H200 measurements, bench/NOTES.md). Session 7 (`bench_bgmv
// --variants`, after the (since deleted) fused grouped stage and the staged contiguous pair): rank
// 64 grouped wins from P 1024 at T >= 128 (T 256 k 6 / 8 0.69-0.82x, T 512 k 2 0.89-0.97x, T 128 k
// 8 0.87-0.96x of per-route; T 128 k 6 and T 256 k 2 lose); rank 16 per-route wins at P 1024 (T 512
// k 2, 0.97-1.00x of grouped) and grouped from P 1536 (T 256 k 6).
constexpr int64_t kGroupedSm90MinPairs = 1024;
constexpr int64_t kGroupedSm90MinTokens = 256;
constexpr int64_t kGroupedSm90MinPairsRank16 = 1536;
constexpr int64_t kGroupedSm90MinPairsRank64 = 1024;
constexpr int64_t kGroupedSm90MinTokensRank64 = 128;
// Session 16 (`--variants`, after the tensor-core expand): rank 32 grouped wins from P 1024 at
// T 128 too (T 128 k 8: 0.917-0.938 of per-route / specialized; T 512 k 2: 0.949-0.962 of the
// specialized body, which the window used to pick there); T 128 k 6 (P 768) still loses.
constexpr int64_t kGroupedSm90MinTokensRank32 = 128;

// spec §6 order remap.
constexpr int64_t kRemapMinPairs = 1024;
constexpr int64_t kRemapMinWeightBytes = 220ll * 1024 * 1024;
constexpr int64_t kRemapRank64MinHidden = 4096;

// spec §7 specialized bodies.
constexpr int64_t kSpecializedRank = 32;
constexpr int64_t kSpecializedMinTokens = 32;
constexpr int64_t kSpecializedMaxTokens = 1024;
constexpr int kSpecializedSchedules = 3;

/// Where the specialized body is chosen on SM90: tokens [min_tokens, max_tokens] and pairs
/// [min_pairs, max_pairs] (the win depends on T * k, not on T alone).
struct SpecializedWindow {
  int64_t min_tokens;
  int64_t max_tokens;
  int64_t min_pairs;
  int64_t max_pairs;
};
// SM90 windows from the H200 measurements of bench_bgmv --specialized
// (bench/results/2026-11-29_3b10a19_bgmv-specialized.md; both hidden sizes alike): specialized
// wins at decode (T <= 8, 1.03-1.29x, ahead of the fused decode path) and for T 32-512 at k 2 /
// T 16-128 at k 8 (1.05-1.23x); it loses at T 16, k 2 (P 32: 0.90x) and from P 2048 on, where
// the grouped pipeline wins (0.61-0.98x). Since session 16 the SM90 grouped rule is applied first
// (choose_variant), so P 1024 at T >= 128 goes grouped (its tensor-core expand beat the body).
constexpr std::array<SpecializedWindow, 2> kSm90SpecializedWindows{{
    {1, 8, 1, 1024},
    {9, 1024, 64, 1024},
}};
// SM90 schedules (same table): 256 columns from T 64 on, 64 columns below that at k >= 4,
// 128 columns otherwise.
constexpr int64_t kSm90DualColMinTokens = 64;
constexpr int64_t kSm90T64MinTopK = 4;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_generic_rank(int64_t rank) { return rank == 8 || rank == 16 || rank == 32 || rank == 64; }

int64_t group_hist_ctas(int64_t num_pairs) {
  return std::max<int64_t>(1,
                           std::min(kGroupHistCtasMax, ceil_div(num_pairs, kGroupHistPairsPerCta)));
}

int64_t group_max_tiles(int64_t num_pairs, int64_t bins) {
  return ceil_div(num_pairs, kGroupTileRoutes) + bins;
}

/// CTAs of the per-route shrink per hidden split: one per pair and 8 rank rows (spec §4.1).
int64_t shrink_ctas(int64_t num_pairs, int64_t rank) {
  return core::checked_mul(num_pairs, rank / kRankTile, "num_pairs", "shrink CTAs");
}

/// L * E (lora, expert) bins.
int64_t num_bins(int64_t num_loras, int64_t num_experts) {
  return core::checked_mul(num_loras, num_experts, "num_loras", "num_loras * num_experts");
}

}  // namespace

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::kSm90a:
      return "sm90a";
    case Arch::kSm100a:
      return "sm100a";
    case Arch::kSm103a:
      return "sm103a";
    case Arch::kOther:
      return "other";
  }
  return "other";
}

Arch arch_from_capability(int major, int minor) {
  if (major == 9 && minor == 0) return Arch::kSm90a;
  if (major == 10 && minor == 0) return Arch::kSm100a;
  if (major == 10 && minor == 3) return Arch::kSm103a;
  return Arch::kOther;
}

bool is_blackwell(Arch arch) { return arch == Arch::kSm100a || arch == Arch::kSm103a; }

const char* variant_name(Variant variant) {
  switch (variant) {
    case Variant::kGeneric:
      return "generic";
    case Variant::kSpecialized:
      return "specialized";
    case Variant::kPortable:
      return "portable";
  }
  return "portable";
}

bool register_shrink_region(int64_t num_pairs, int64_t rank, Arch arch) {
  return arch == Arch::kSm90a && num_pairs <= kRegisterShrinkMaxPairs &&
         shrink_ctas(num_pairs, rank) <= kRegisterShrinkMaxCtas;
}

ShrinkLaunch select_generic_shrink(int64_t num_pairs, int64_t rank, int64_t hidden, Arch arch) {
  core::require(num_pairs > 0, "num_pairs", "must be positive, got " + std::to_string(num_pairs));
  core::require(is_generic_rank(rank), "rank",
                "must be one of 8, 16, 32, 64, got " + std::to_string(rank));
  core::require(hidden > 0, "hidden_size", "must be positive, got " + std::to_string(hidden));
  const int64_t tiles = ceil_div(hidden, kShrinkTile);
  const int64_t ctas = shrink_ctas(num_pairs, rank);
  const int64_t max_splits = num_pairs <= kSplitMaxPairs ? std::min(tiles, kSplitMax) : 1;
  const int64_t splits =
      std::min(max_splits, std::max<int64_t>(1, ceil_div(kSplitTargetCtas, ctas)));
  const bool deep =
      ctas <= kDeepRingMaxCtas || (arch != Arch::kSm90a && ctas <= kDeepRingBlackwellMaxCtas &&
                                   hidden >= kDeepRingBlackwellMinHidden);
  ShrinkLaunch launch;
  launch.form = deep ? kFormPrefillDeep : kFormPrefill;
  launch.splits = static_cast<int>(splits);
  return launch;
}

ShrinkLaunch plan_generic_shrink(int64_t num_pairs, int64_t rank, int64_t hidden, Arch arch) {
  ShrinkLaunch launch = select_generic_shrink(num_pairs, rank, hidden, arch);
  if (register_shrink_region(num_pairs, rank, arch)) {
    const int64_t ctas = shrink_ctas(num_pairs, rank);  // 8-row blocks
    if (4 * ctas <= kRegisterSplitRowsMaxCtas) return {kFormRegistersQuarter, 1};
    if (2 * ctas <= kRegisterSplitRowsMaxCtas) return {kFormRegistersHalf, 1};
    return {kFormRegisters, 1};
  }
  // Splits stay the selector's (1 from 128 CTAs on), so the form never changes a bit.
  if (arch == Arch::kSm90a && shrink_ctas(num_pairs, rank) >= kRegisterOneMinCtas) {
    launch.form = kFormRegistersOne;
    return launch;
  }
  // NOTE: above the region the register form (same splits) measured 2-10 % faster on SM90 at
  // rank 64 and at rank 32 with H >= 4096, and 1-8 % slower at ranks 16 / 32 below that.
  if (arch == Arch::kSm90a &&
      (rank == 64 || (rank == 32 && hidden >= kRegisterShrinkRank32MinHidden))) {
    launch.form = kFormRegisters;
  }
  return launch;
}

bool is_specialized_shape(int64_t hidden, int64_t rank) {
  return (hidden == 2688 || hidden == 3072) && rank == kSpecializedRank;
}

Variant select_variant(int64_t num_tokens, int64_t num_pairs, int64_t hidden, int64_t rank,
                       Arch arch, bool specialized_built) {
  // NOTE: spec §7 (newest JIT): [32, 1024] tokens on Blackwell; SM90 by the measured windows.
  bool in_window = is_blackwell(arch) && num_tokens >= kSpecializedMinTokens &&
                   num_tokens <= kSpecializedMaxTokens;
  if (arch == Arch::kSm90a) {
    for (const SpecializedWindow& w : kSm90SpecializedWindows) {
      in_window = in_window || (num_tokens >= w.min_tokens && num_tokens <= w.max_tokens &&
                                num_pairs >= w.min_pairs && num_pairs <= w.max_pairs);
    }
  }
  return specialized_built && is_specialized_shape(hidden, rank) && in_window
             ? Variant::kSpecialized
             : Variant::kGeneric;
}

int select_generic_schedule(int64_t num_tokens) { return num_tokens <= 8 ? 0 : 1; }

int plan_generic_schedule(int64_t num_tokens, int64_t num_pairs, int64_t rank, Arch arch) {
  const int spec = select_generic_schedule(num_tokens);
  if (arch != Arch::kSm90a || spec == 1) return spec;
  // NOTE: H200 timelines of 2026-11-30 (bench/results/2026-11-30_*_bgmv-session10.md): with 8
  // routes the wide schedule's post-wait work is 4 dependent L2 batches (1.7-2.0 µs against the
  // portable path's 0.6); the decode schedule loads every route's B before the wait (0.9-1.2 µs).
  // It wins at T 1-4 with 8 routes per token and at T 1 with 6 at ranks 32 / 64; with fewer
  // routes it loads clamped copies, and from T 8 (or rank 64 at T 4) its grid takes two waves.
  if (num_pairs <= kDecodeScheduleMaxPairs) {
    if (num_tokens <= kDecodeScheduleMaxTokens && rank <= 32 && num_pairs >= 8 * num_tokens) {
      return kScheduleDecode;
    }
    if (num_tokens == 1 && rank >= 32 && num_pairs >= 6) return kScheduleDecode;
  }
  // NOTE: H200 table of 2026-11-30 (bench/results/2026-11-30_*_bgmv-decode.md): at T <= 8 the
  // wide schedule wins 5-20 % at ranks 8-32 and at one or two routes per token; rank 64 with more
  // routes keeps the narrow one (the wide schedule loads one route per trip there).
  return rank == 64 && num_pairs > 2 * num_tokens ? 0 : 1;
}

int select_specialized_schedule(int64_t num_tokens, int64_t num_pairs, int64_t hidden, Arch arch) {
  if (arch == Arch::kSm90a) {
    if (num_tokens >= kSm90DualColMinTokens) return 2;
    return num_pairs >= core::checked_mul(kSm90T64MinTopK, num_tokens, "num_tokens") ? 0 : 1;
  }
  if (num_tokens == 1 || num_tokens == 4 || num_tokens == 8) return 0;
  if (hidden == 3072 && (num_tokens == 512 || num_tokens == 1024)) return 2;
  if (hidden == 2688 && num_tokens == 1024) return 2;
  return 1;
}

int select_pdl_mode(Variant variant, int64_t num_tokens, int64_t hidden, Arch arch, int num_sms) {
  if (variant != Variant::kGeneric) return 0;
  const int64_t expand_ctas =
      core::checked_mul(num_tokens, ceil_div(hidden, kPdlExpandCols), "num_tokens", "expand CTAs");
  if (arch == Arch::kSm90a) {
    return expand_ctas <= kPdlSmallPerSmHopper * num_sms ? 1 : 0;
  }
  if (is_blackwell(arch)) {
    return expand_ctas <= kPdlSmallPerSmBlackwell * num_sms ? 1 : 2;
  }
  return 0;
}

int select_launch_pdl_mode(int64_t num_tokens, int64_t hidden, Arch arch, int num_sms) {
  // NOTE: §4.4 launches plainly on SM90 above 12 expand CTAs per SM; with the expand's pre-wait
  // work (LoRA, route scan or contiguous pair, B) the early trigger won every such row measured.
  if (arch == Arch::kSm90a) return 1;
  return select_pdl_mode(Variant::kGeneric, num_tokens, hidden, arch, num_sms);
}

bool select_grouped(int64_t num_pairs, int64_t /*num_tokens*/, int64_t num_loras,
                    int64_t num_experts, int64_t hidden, int64_t rank) {
  const int64_t bins = num_bins(num_loras, num_experts);
  if (bins <= 0 || bins > kGroupBinsMax) return false;
  if (num_pairs < kGroupedMinPairs) return false;
  if (num_pairs < kGroupedMinRoutesPerBin * bins) return false;
  if (rank < 64 && num_pairs < kGroupedMinPairsSub64) return false;
  const int64_t min_elems = rank >= 16 ? kGroupedMinWeightElems : kGroupedMinWeightElemsSub16;
  if (core::checked_mul(hidden, rank, "hidden_size", "hidden * rank") < min_elems) return false;
  if (ceil_div(num_pairs, kGroupTileRoutes) >= kGroupedMaxTileRows) return false;
  return group_max_tiles(num_pairs, bins) < (int64_t{1} << 31);
}

bool select_grouped_sm90(int64_t num_pairs, int64_t num_tokens, int64_t num_loras,
                         int64_t num_experts, int64_t rank) {
  const int64_t bins = num_bins(num_loras, num_experts);
  if (bins <= 0 || bins > kGroupBinsMax) return false;
  if (ceil_div(num_pairs, kGroupTileRoutes) >= kGroupedMaxTileRows) return false;
  // Per-route wins at few tokens with many routes each (its token-owned expand batches a
  // token's routes); grouped wins once bins repeat enough.
  if (rank >= 64) {
    return num_pairs >= kGroupedSm90MinPairsRank64 && num_tokens >= kGroupedSm90MinTokensRank64;
  }
  if (rank == 32) {
    return num_pairs >= kGroupedSm90MinPairs && num_tokens >= kGroupedSm90MinTokensRank32;
  }
  const int64_t min_pairs = rank == 16 ? kGroupedSm90MinPairsRank16 : kGroupedSm90MinPairs;
  return num_pairs >= min_pairs && num_tokens >= kGroupedSm90MinTokens;
}

bool select_order_remap(int64_t num_pairs, int64_t /*num_tokens*/, int64_t num_loras,
                        int64_t num_experts, int64_t hidden, int64_t rank, Arch arch) {
  if (arch != Arch::kSm90a) return false;  // Blackwell's L2 serves repeats in any order
  const int64_t bins = num_bins(num_loras, num_experts);
  if (bins <= 0 || bins > kGroupBinsMax) return false;
  if (num_pairs < kRemapMinPairs || num_pairs > kOrderBuildMaxPairs) return false;
  if (rank >= 64 && hidden < kRemapRank64MinHidden) return false;
  if (select_generic_shrink(num_pairs, rank, hidden, arch).form == kFormPrefillDeep) return false;
  return core::checked_product({num_pairs, hidden, rank, 2}, "num_pairs", "the weight bytes") >=
         kRemapMinWeightBytes;
}

CakeSupport cake_support(const SupportQuery& q) {
  const std::string prefix = "Cake BGMV MoE ";
  if (q.capability &&
      arch_from_capability(q.capability->major, q.capability->minor) == Arch::kOther) {
    return {"device", prefix +
                          "requires an exact SM90, SM100 or SM103 CUDA device; got capability=(" +
                          std::to_string(q.capability->major) + ", " +
                          std::to_string(q.capability->minor) + ")"};
  }
  if (q.num_slices != 1) {
    return {"lora_a_weights",
            prefix + "requires exactly one LoRA slice, got " + std::to_string(q.num_slices)};
  }
  if (!is_generic_rank(q.rank)) {
    return {"lora_a_weights",
            prefix + "requires LoRA rank in (8, 16, 32, 64), got " + std::to_string(q.rank)};
  }
  if (q.hidden <= 0 || q.hidden % 8 != 0) {
    return {"x", prefix + "hidden_size must be a positive multiple of 8, got " +
                     std::to_string(q.hidden)};
  }
  if (q.feat_out != q.hidden) {
    return {"lora_b_weights", prefix + "requires LoRA-B feat_out == hidden_size, got feat_out=" +
                                  std::to_string(q.feat_out) +
                                  " for hidden_size=" + std::to_string(q.hidden)};
  }
  return {};
}

std::string fallback_warning(const std::string& reason) {
  return "prepare_bgmv_moe: falling back to the portable bgmv_moe_shrink/bgmv_moe_expand path (" +
         reason + "). Pass fallback=false to raise instead.";
}

RouteIndexLayout route_index_layout(int64_t num_tokens) {
  core::require_in_range(num_tokens, 0, kMaxNumTokens, "num_tokens", "num_tokens");
  RouteIndexLayout l;
  l.count = RouteIndexLayout::kHeaderWords;
  l.base_even = l.count + num_tokens;
  l.base_odd = l.base_even + num_tokens;
  l.slots = l.base_odd + num_tokens;
  l.split_partials = l.slots + RouteIndexLayout::kSlotsPerToken * num_tokens;
  l.split_counters = l.split_partials + RouteIndexLayout::kMaxSplits *
                                            RouteIndexLayout::kMaxSplitPairs *
                                            RouteIndexLayout::kMaxSplitRank;
  l.total_words = l.split_counters +
                  RouteIndexLayout::kMaxSplitPairs * (RouteIndexLayout::kMaxSplitRank / kRankTile);
  return l;
}

GroupedGeometry grouped_geometry(int64_t num_pairs, int64_t hidden, int index_override,
                                 int64_t bins) {
  GroupedGeometry g;
  // NOTE: the one-CTA index's shared memory (bins + 1 + 2 P + T ints, T counted up to 16384) is
  // at most 208 KB for bins <= 4096 and P <= 16384, so only P limits it.
  if (index_override >= 0) {
    core::require(index_override == 0 || num_pairs <= kGroupFusedIndexMaxPairs, "grouped_index",
                  "the one-CTA index takes at most 16384 pairs, got " + std::to_string(num_pairs));
    g.fused_index = index_override == 1;
  } else {
    g.fused_index = num_pairs <= kGroupFusedIndexMaxPairs;
  }
  const int64_t row_bytes = grouped_stage_row_bytes(hidden);
  const bool many_parts = bins > 0 && num_pairs >= kGroupStageAMinRoutesPerBin * bins;
  if ((kRankTile + kGroupShrinkPart) * row_bytes <= kGroupStageXMaxBytes && !many_parts) {
    g.stage = 2;
  } else if (kRankTile * row_bytes <= kGroupStageAMaxBytes) {
    g.stage = 1;
  }
  return g;
}

GroupedWorkspace grouped_workspace(int64_t num_pairs, int64_t num_tokens, int64_t num_loras,
                                   int64_t num_experts, int64_t hidden) {
  // NOTE: with the bounds of bgmv.h every term below stays far inside int64.
  core::require_in_range(num_pairs, 0, kMaxNumPairs, "num_pairs", "num_pairs");
  core::require_in_range(num_tokens, 0, kMaxNumTokens, "num_tokens", "num_tokens");
  core::require_in_range(hidden, 0, kMaxHiddenSize, "hidden_size", "hidden_size");
  GroupedWorkspace w;
  w.bins = num_bins(num_loras, num_experts);
  core::require_in_range(w.bins, 0, kMaxNumLoras * kMaxNumExperts, "num_loras", "bins");
  w.hist_ctas = group_hist_ctas(num_pairs);
  w.max_tiles = group_max_tiles(num_pairs, w.bins);
  w.int_words = kGroupHeaderWords + (w.bins + 1) + w.max_tiles + num_pairs + num_tokens +
                RouteIndexLayout::kSlotsPerToken * num_tokens + 2 * w.hist_ctas * w.bins +
                kGroupAlignPadWords + 4 * w.max_tiles + num_pairs * kGroupTileRowWords;
  w.partial_floats = num_pairs * hidden;
  return w;
}

std::ostream& operator<<(std::ostream& os, const PlanChoice& c) {
  os << "bgmv plan: variant=" << variant_name(c.variant);
  if (c.shrink_launch) {
    os << " shrink_launch=(" << c.shrink_launch->form << ", " << c.shrink_launch->splits << ")";
  }
  os << " grouped=" << c.grouped << " order_remap=" << c.order_remap << " pdl_mode=" << c.pdl_mode
     << " launch_pdl=" << c.launch_pdl_mode << " schedule_id=";
  if (c.schedule_id)
    os << *c.schedule_id;
  else
    os << "none";
  if (!c.fallback_reason.empty()) os << " fallback_reason=\"" << c.fallback_reason << "\"";
  return os;
}

namespace {

/// The variant of a Cake plan: the selector's, or the forced one (variant_override).
Variant choose_variant(const ProblemDesc& p) {
  core::require(p.variant_override >= -1 && p.variant_override <= 1, "variant",
                "the override must be -1 (select), 0 (generic) or 1 (specialized), got " +
                    std::to_string(p.variant_override));
  if (p.variant_override < 0) {
    if (generic_pipeline_forced(p)) return Variant::kGeneric;
    // NOTE: on SM90 the grouped rule goes before the specialized windows (session 16: with the
    // tensor-core expand grouped beat the specialized body on every P 1024 row it took).
    if (p.arch == Arch::kSm90a && !p.grouped.has_value() &&
        select_grouped_sm90(p.num_pairs, p.num_tokens, p.num_loras, p.num_experts, p.rank)) {
      return Variant::kGeneric;
    }
    return select_variant(p.num_tokens, p.num_pairs, p.hidden, p.rank, p.arch, p.specialized_built);
  }
  if (p.variant_override == 0) return Variant::kGeneric;
  core::require(is_specialized_shape(p.hidden, p.rank), "variant",
                "the specialized variant needs hidden_size 2688 or 3072 and rank 32, got "
                "hidden_size=" +
                    std::to_string(p.hidden) + ", rank=" + std::to_string(p.rank));
  core::require(!p.grouped.value_or(false), "grouped",
                "grouped=true cannot be combined with the specialized variant");
  core::require_supported(p.specialized_built, "variant",
                          "this build has no specialized BGMV kernel unit for hidden_size " +
                              std::to_string(p.hidden) + " (CAKEMOE_KERNELS / gencode)");
  return Variant::kSpecialized;
}

}  // namespace

bool generic_pipeline_forced(const ProblemDesc& p) {
  return p.grouped.value_or(false) || p.order_remap.value_or(false);
}

PlanChoice choose_cake_plan(const ProblemDesc& p) {
  core::require(p.arch == Arch::kSm90a || is_blackwell(p.arch), "arch",
                "a Cake plan needs sm90a, sm100a or sm103a, got the Arch value " +
                    std::to_string(static_cast<unsigned>(p.arch)));
  PlanChoice c;
  c.variant = choose_variant(p);
  core::require(p.schedule_override == -1 ||
                    (c.variant == Variant::kSpecialized && p.schedule_override >= 0 &&
                     p.schedule_override < kSpecializedSchedules),
                "schedule_id",
                "a forced schedule must be 0, 1 or 2 on a specialized plan, got " +
                    std::to_string(p.schedule_override));
  const bool remap_forced = p.order_remap.value_or(false);
  if (c.variant == Variant::kSpecialized) {
    core::require(!remap_forced, "order_remap",
                  "order_remap=true cannot be combined with the specialized variant");
    c.schedule_id = p.schedule_override >= 0
                        ? p.schedule_override
                        : select_specialized_schedule(p.num_tokens, p.num_pairs, p.hidden, p.arch);
    c.pdl_mode = select_pdl_mode(c.variant, p.num_tokens, p.hidden, p.arch, p.num_sms);
    // The generic selector's splits (same bits) and PDL chaining (same launch sequence).
    c.shrink_splits = plan_generic_shrink(p.num_pairs, p.rank, p.hidden, p.arch).splits;
    c.launch_pdl_mode = select_launch_pdl_mode(p.num_tokens, p.hidden, p.arch, p.num_sms);
    return c;
  }
  ShrinkLaunch shrink = plan_generic_shrink(p.num_pairs, p.rank, p.hidden, p.arch);
  core::require(p.generic_schedule_override >= -1 && p.generic_schedule_override <= kScheduleDecode,
                "schedule_id",
                "a forced generic expand schedule must be 0, 1 or 2, got " +
                    std::to_string(p.generic_schedule_override));
  if (p.shrink_override.has_value()) {
    shrink = *p.shrink_override;
    core::require(shrink.form == kFormPrefill || shrink.form == kFormPrefillDeep ||
                      shrink.form == kFormRegisters || shrink.form == kFormRegistersOne ||
                      shrink.form == kFormRegistersHalf || shrink.form == kFormRegistersQuarter,
                  "shrink_launch",
                  "form must be 0, 2, 3, 4, 5 or 6, got " + std::to_string(shrink.form));
    core::require(shrink.form < kFormRegistersHalf || shrink.splits == 1, "shrink_launch",
                  "forms 5 and 6 take one split, got " + std::to_string(shrink.splits));
    core::require(shrink.splits >= 1 && shrink.splits <= kSplitMax &&
                      (shrink.splits == 1 || p.num_pairs <= kSplitMaxPairs),
                  "shrink_launch",
                  "splits must be 1.." + std::to_string(kSplitMax) + ", and 1 above " +
                      std::to_string(kSplitMaxPairs) + " pairs, got " +
                      std::to_string(shrink.splits));
  }
  const int64_t bins = num_bins(p.num_loras, p.num_experts);
  const bool sm90 = p.arch == Arch::kSm90a;
  c.grouped =
      p.grouped.has_value() ? *p.grouped
      : sm90
          ? select_grouped_sm90(p.num_pairs, p.num_tokens, p.num_loras, p.num_experts, p.rank)
          : select_grouped(p.num_pairs, p.num_tokens, p.num_loras, p.num_experts, p.hidden, p.rank);
  if (c.grouped) {
    core::require(!remap_forced, "order_remap",
                  "order_remap=true cannot be combined with the grouped pipeline");
    core::require(
        bins >= 1 && bins <= kGroupBinsMax, "grouped",
        "the grouped pipeline needs 1..4096 (lora, expert) bins, got " + std::to_string(bins));
    core::require(ceil_div(p.num_pairs, kGroupTileRoutes) < kGroupedMaxTileRows, "grouped",
                  "the grouped pipeline needs ceil(num_pairs / 16) < 65536");
  } else {
    // NOTE: select_order_remap is spec §6's rule; it only ever picks SM90, where the remap
    // measured slower than identity dispatch on every shape (its one-CTA prologue costs 13-19 us
    // and the L2 reuse it buys is already there), so cakemoe applies it only when forced.
    c.order_remap = p.order_remap.value_or(false);
  }
  if (c.order_remap) {
    core::require(
        p.num_pairs <= kOrderBuildMaxPairs, "order_remap",
        "the order remap prologue handles at most 4096 pairs, got " + std::to_string(p.num_pairs));
    core::require(bins >= 1 && bins <= kGroupBinsMax, "order_remap",
                  "the order remap needs 1..4096 (lora, expert) bins, got " + std::to_string(bins));
    // NOTE: spec §6: the remap forms are two-stage; splits stay so bits match identity dispatch.
    shrink.form = kFormPrefill;
  }
  c.shrink_launch = shrink;
  c.shrink_splits = shrink.splits;
  c.pdl_mode = select_pdl_mode(c.variant, p.num_tokens, p.hidden, p.arch, p.num_sms);
  // NOTE: the order remap keeps §4.4's launches (its forms were measured with them).
  c.launch_pdl_mode = c.order_remap
                          ? c.pdl_mode
                          : select_launch_pdl_mode(p.num_tokens, p.hidden, p.arch, p.num_sms);
  c.schedule_id = p.generic_schedule_override >= 0
                      ? p.generic_schedule_override
                      : plan_generic_schedule(p.num_tokens, p.num_pairs, p.rank, p.arch);
  // NOTE: the fused decode (one cooperative launch of shrink and expand) was deleted in session
  // 7: on the H200 the two-kernel plan beat it on every T <= 8 row, by up to 2x at rank 64, k 6 /
  // 8 (bench/results/2026-11-30_*_bgmv-decode.md); its code is in git history (e.g. at 1243c87).
  return c;
}

PlanChoice choose_portable_plan(const std::string& reason) {
  PlanChoice c;
  c.variant = Variant::kPortable;
  c.fallback_reason = reason;
  return c;
}

}  // namespace bgmv
}  // namespace cakemoe
