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
// SM90 decode region of the register kinds (table with forced launches,
// bench/results/*_94bfef4_bgmv-decode.md): kRegisters with one split beats the rings with
// splits, the fused decode and the specialized body from T 1 up to these sizes. P 48 (T 8, k 6,
// rank 16: 96 CTAs) was 0.87-0.91x of the ring with 2 splits; P 64 at rank 16 (128 CTAs) was
// 1.06-1.26x, so the CTA bound stays.
constexpr int64_t kRegisterShrinkMaxPairs = 48;
constexpr int64_t kRegisterShrinkMaxCtas = 96;
constexpr int64_t kRegisterShrinkRank32MinHidden = 4096;
// SM90: from this many shrink CTAs (P * R / 8) kRegistersOneTile beat every other kind at every
// measured rank and H (0.87-1.01 of the plan's kind at 384-4096 CTAs, rank 16 T 256 / 512 k 2
// 0.87-0.88; 1.01-1.23 below 384, where fewer, fatter CTAs keep more in flight;
// bench/results/*_fcc4eb7_*).
constexpr int64_t kRegisterOneMinCtas = 384;
// Quarter / half blocks inside the register region while their CTAs (P * R / 2, P * R / 4) stay
// <= 64 (half blocks 0.93-0.99 of kRegisters at 8-64 CTAs, 1.05-1.16 at 96-192 where CTAs share
// SMs; quarter blocks 0.94-0.99 of half blocks at 16-64 CTAs, 1.07-1.15 at 128;
// bench/results/*_c34ca38_*).
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
// the first part's x (bench/results/*_8f3495b_*: 2-5 % at k 6 / 8, T >=
// 1024; A and x win by 1-3 % at 2-4 routes per bin).
constexpr int64_t kGroupStageAMinRoutesPerBin = 6;
constexpr int64_t kGroupAlignPadWords = 3;      // tile_info starts 16-byte aligned
constexpr int64_t kGroupTileRowWords = 64 / 2;  // tile_rows: rank <= 64 16-bit values

// cakemoe's SM90 grouped crossover (measurements of `bench_bgmv --variants`, bench/NOTES.md):
// rank 64 grouped wins from P 1024 at T >= 128 (T 256 k 6 / 8 0.69-0.82x, T 512 k 2 0.89-0.97x,
// T 128 k 8 0.87-0.96x of per-route; T 128 k 6 and T 256 k 2 lose); rank 16 per-route wins at
// P 1024 (T 512 k 2, 0.97-1.00x of grouped) and grouped from P 1536 (T 256 k 6).
constexpr int64_t kGroupedSm90MinPairs = 1024;
constexpr int64_t kGroupedSm90MinTokens = 256;
constexpr int64_t kGroupedSm90MinPairsRank16 = 1536;
constexpr int64_t kGroupedSm90MinPairsRank64 = 1024;
constexpr int64_t kGroupedSm90MinTokensRank64 = 128;
// With the tensor-core expand rank 32 grouped wins from P 1024 at T 128 too (T 128 k 8:
// 0.917-0.938 of per-route / specialized; T 512 k 2: 0.949-0.962 of the specialized body, which
// the window used to pick there); T 128 k 6 (P 768) still loses.
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
// SM90 windows from the measurements of bench_bgmv --specialized
// (bench/results/*_3b10a19_bgmv-specialized.md; both hidden sizes alike): specialized
// wins at decode (T <= 8, 1.03-1.29x, ahead of the fused decode path) and for T 32-512 at k 2 /
// T 16-128 at k 8 (1.05-1.23x); it loses at T 16, k 2 (P 32: 0.90x) and from P 2048 on, where
// the grouped pipeline wins (0.61-0.98x). The SM90 grouped rule is applied first (choose_variant),
// so P 1024 at T >= 128 goes grouped (its tensor-core expand beat the body).
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
  launch.kind = deep ? ShrinkKind::kRing3Stage : ShrinkKind::kRing2Stage;
  launch.splits = static_cast<int>(splits);
  return launch;
}

ShrinkLaunch plan_generic_shrink(int64_t num_pairs, int64_t rank, int64_t hidden, Arch arch) {
  ShrinkLaunch launch = select_generic_shrink(num_pairs, rank, hidden, arch);
  if (register_shrink_region(num_pairs, rank, arch)) {
    const int64_t ctas = shrink_ctas(num_pairs, rank);  // 8-row blocks
    if (4 * ctas <= kRegisterSplitRowsMaxCtas) return {ShrinkKind::kRegistersQuarterBlock, 1};
    if (2 * ctas <= kRegisterSplitRowsMaxCtas) return {ShrinkKind::kRegistersHalfBlock, 1};
    return {ShrinkKind::kRegisters, 1};
  }
  // Splits stay the selector's (1 from 128 CTAs on), so the kind never changes a bit.
  if (arch == Arch::kSm90a && shrink_ctas(num_pairs, rank) >= kRegisterOneMinCtas) {
    launch.kind = ShrinkKind::kRegistersOneTile;
    return launch;
  }
  // NOTE: above the region kRegisters (same splits) measured 2-10 % faster on SM90 at rank 64 and
  // at rank 32 with H >= 4096, and 1-8 % slower at ranks 16 / 32 below that.
  if (arch == Arch::kSm90a &&
      (rank == 64 || (rank == 32 && hidden >= kRegisterShrinkRank32MinHidden))) {
    launch.kind = ShrinkKind::kRegisters;
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
  // NOTE: per-CTA timelines (bench/results/*_c34ca38_*): with 8 routes
  // the wide schedule's post-wait work is 4 dependent L2 batches (1.7-2.0 µs against the portable
  // path's 0.6); the decode schedule loads every route's B before the wait (0.9-1.2 µs).
  // It wins at T 1-4 with 8 routes per token and at T 1 with 6 at ranks 32 / 64; with fewer
  // routes it loads clamped copies, and from T 8 (or rank 64 at T 4) its grid takes two waves.
  if (num_pairs <= kDecodeScheduleMaxPairs) {
    if (num_tokens <= kDecodeScheduleMaxTokens && rank <= 32 && num_pairs >= 8 * num_tokens) {
      return kScheduleDecode;
    }
    if (num_tokens == 1 && rank >= 32 && num_pairs >= 6) return kScheduleDecode;
  }
  // NOTE: at T <= 8 the wide schedule wins 5-20 % at ranks 8-32 and at one or two routes per token
  // (bench/results/*_94bfef4_bgmv-decode.md); rank 64 with more routes keeps the narrow
  // one (the wide schedule loads one route per trip there).
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
  if (select_generic_shrink(num_pairs, rank, hidden, arch).kind == ShrinkKind::kRing3Stage) {
    return false;
  }
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
    os << " shrink_launch=(" << shrink_kind_name(c.shrink_launch->kind) << ", "
       << c.shrink_launch->splits << ")";
  }
  os << " grouped=" << c.grouped << " order_remap=" << c.order_remap << " pdl_mode=" << c.pdl_mode
     << " launch_pdl=" << c.launch_pdl_mode << " schedule_id=";
  if (c.schedule_id)
    os << *c.schedule_id;
  else
    os << "none";
  if (c.grouped) {
    const GroupedGeometry& g = c.geometry;
    os << " grouped_form=(index=" << (g.fused_index ? "one_cta" : "hist_scan_scatter")
       << " stage=" << g.stage << " packed_routes=" << g.packed_routes
       << " discard_partials=" << g.discard_partials
       << " expand=" << (g.tensor_core_expand ? "tensor_cores" : "simt") << ")";
  }
  if (!c.fallback_reason.empty()) os << " fallback_reason=\"" << c.fallback_reason << "\"";
  return os;
}

namespace {

/// The variant of a Cake plan: the selector's, or the forced one (PlanOverrides::variant).
Variant choose_variant(const ProblemDesc& p) {
  const std::optional<Variant> forced = p.overrides.variant;
  core::require(forced != Variant::kPortable, "variant",
                "the portable path is taken by prepare, not by the Cake planner");
  if (!forced.has_value()) {
    if (generic_pipeline_forced(p)) return Variant::kGeneric;
    // NOTE: on SM90 the grouped rule goes before the specialized windows (with the tensor-core
    // expand grouped beat the specialized body on every P 1024 row it took).
    if (p.arch == Arch::kSm90a && !p.grouped.has_value() &&
        select_grouped_sm90(p.num_pairs, p.num_tokens, p.num_loras, p.num_experts, p.rank)) {
      return Variant::kGeneric;
    }
    return select_variant(p.num_tokens, p.num_pairs, p.hidden, p.rank, p.arch, p.specialized_built);
  }
  if (*forced == Variant::kGeneric) return Variant::kGeneric;
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

/// The forced generic shrink (PlanOverrides::shrink), checked against the kernels' limits.
ShrinkLaunch checked_shrink_override(const ShrinkLaunch& shrink, int64_t num_pairs) {
  core::require(shrink_form_number(shrink.kind) >= 0, "shrink_launch",
                "unknown shrink kind " + std::to_string(static_cast<int>(shrink.kind)));
  const bool sub_block = shrink.kind == ShrinkKind::kRegistersHalfBlock ||
                         shrink.kind == ShrinkKind::kRegistersQuarterBlock;
  core::require(
      !sub_block || shrink.splits == 1, "shrink_launch",
      "half and quarter rank blocks take one split, got " + std::to_string(shrink.splits));
  core::require(shrink.splits >= 1 && shrink.splits <= kSplitMax &&
                    (shrink.splits == 1 || num_pairs <= kSplitMaxPairs),
                "shrink_launch",
                "splits must be 1.." + std::to_string(kSplitMax) + ", and 1 above " +
                    std::to_string(kSplitMaxPairs) + " pairs, got " +
                    std::to_string(shrink.splits));
  return shrink;
}

/// How a grouped plan runs on the GPU: grouped_geometry()'s index and staging (or the forced
/// ones), the sorted_routes form, the partials discard and the expand kind.
GroupedGeometry plan_grouped_geometry(const ProblemDesc& p) {
  const PlanOverrides& o = p.overrides;
  const int index_override = o.fused_index.has_value() ? (*o.fused_index ? 1 : 0) : -1;
  GroupedGeometry g =
      grouped_geometry(p.num_pairs, p.hidden, index_override, p.num_loras * p.num_experts);
  if (o.grouped_stage.has_value()) {
    // The largest staging whose shared memory fits H (the bin count only picks between fits).
    const int fits = grouped_geometry(p.num_pairs, p.hidden, index_override).stage;
    core::require(*o.grouped_stage >= 0 && *o.grouped_stage <= fits, "grouped_stage",
                  "a forced grouped shrink staging must be 0.." + std::to_string(fits) +
                      " at hidden_size " + std::to_string(p.hidden) + ", got " +
                      std::to_string(*o.grouped_stage));
    g.stage = *o.grouped_stage;
  }
  // NOTE: 16 bits of pair id and 15 of token in one int32 (spec §5's P ranges up to 2^20 on the
  // hist / scan / scatter path; those plans keep pair ids alone).
  const bool packed_fits =
      p.num_pairs <= kPackedRoutesMaxPairs && p.num_tokens <= kPackedRoutesMaxTokens;
  core::require(!o.packed_routes.value_or(false) || packed_fits, "packed_routes",
                "packed sorted_routes need num_pairs <= 65536 and num_tokens <= 32768");
  g.packed_routes = o.packed_routes.value_or(packed_fits);
  // NOTE: a discarded line must hold one route's partials only: rows of H floats start on a
  // 128-byte line when H % 32 == 0 (the buffer itself is 256-byte aligned).
  g.discard_partials = p.hidden % 32 == 0;
  g.tensor_core_expand = grouped_tensor_core_expand(static_cast<int>(p.rank));
  return g;
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
  const PlanOverrides& o = p.overrides;
  const std::optional<int> forced_schedule = o.specialized_schedule;
  core::require(!forced_schedule.has_value() ||
                    (c.variant == Variant::kSpecialized && *forced_schedule >= 0 &&
                     *forced_schedule < kSpecializedSchedules),
                "schedule_id",
                "a forced schedule must be 0, 1 or 2 on a specialized plan, got " +
                    std::to_string(forced_schedule.value_or(-1)));
  core::require(o.launch_pdl_mode.value_or(0) >= 0 && o.launch_pdl_mode.value_or(0) <= 2,
                "launch_pdl_mode",
                "a forced PDL mode must be 0 (plain), 1 (early) or 2 (late), got " +
                    std::to_string(o.launch_pdl_mode.value_or(0)));
  const bool remap_forced = p.order_remap.value_or(false);
  if (c.variant == Variant::kSpecialized) {
    core::require(!remap_forced, "order_remap",
                  "order_remap=true cannot be combined with the specialized variant");
    c.schedule_id = forced_schedule.has_value()
                        ? *forced_schedule
                        : select_specialized_schedule(p.num_tokens, p.num_pairs, p.hidden, p.arch);
    c.pdl_mode = select_pdl_mode(c.variant, p.num_tokens, p.hidden, p.arch, p.num_sms);
    // The generic selector's splits (same bits) and PDL chaining (same launch sequence).
    c.shrink_splits = plan_generic_shrink(p.num_pairs, p.rank, p.hidden, p.arch).splits;
    c.launch_pdl_mode = o.launch_pdl_mode.value_or(
        select_launch_pdl_mode(p.num_tokens, p.hidden, p.arch, p.num_sms));
    return c;
  }
  ShrinkLaunch shrink = plan_generic_shrink(p.num_pairs, p.rank, p.hidden, p.arch);
  const int forced_generic = o.generic_schedule.value_or(-1);
  core::require(
      !o.generic_schedule.has_value() || (forced_generic >= 0 && forced_generic <= kScheduleDecode),
      "schedule_id",
      "a forced generic expand schedule must be 0, 1 or 2, got " + std::to_string(forced_generic));
  if (o.shrink.has_value()) shrink = checked_shrink_override(*o.shrink, p.num_pairs);
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
    c.geometry = plan_grouped_geometry(p);
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
    shrink.kind = ShrinkKind::kRing2Stage;
  }
  c.shrink_launch = shrink;
  c.shrink_splits = shrink.splits;
  c.pdl_mode = select_pdl_mode(c.variant, p.num_tokens, p.hidden, p.arch, p.num_sms);
  // NOTE: the order remap keeps §4.4's launches (its forms were measured with them).
  c.launch_pdl_mode = o.launch_pdl_mode.value_or(
      c.order_remap ? c.pdl_mode
                    : select_launch_pdl_mode(p.num_tokens, p.hidden, p.arch, p.num_sms));
  c.schedule_id = forced_generic >= 0
                      ? forced_generic
                      : plan_generic_schedule(p.num_tokens, p.num_pairs, p.rank, p.arch);
  // NOTE: there is no fused decode (one cooperative launch of shrink and expand): the two-kernel
  // plan beat it on every T <= 8 row, by up to 2x at rank 64, k 6 / 8
  // (bench/results/*_94bfef4_bgmv-decode.md); its code is in git history (e.g. at 1243c87).
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
