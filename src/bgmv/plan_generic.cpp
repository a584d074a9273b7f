// The generic variant's per-route launches (spec bgmv §4.1, §4.3, §4.4): shrink kind and splits,
// expand schedule, PDL modes; and the route index layout they share (§3.3).
#include <algorithm>
#include <string>

#include "bgmv/plan.h"
#include "bgmv/plan_limits.h"
#include "core/check.h"
#include "core/checked.h"

namespace cakemoe {
namespace bgmv {
namespace {

// spec §4.1 shrink geometry (the rank tile and the split limits are in plan_limits.h).
constexpr int64_t kShrinkTile = 1024;
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
// Where the generic expand takes the decode schedule (kScheduleDecode, plan_limits.h).
constexpr int64_t kDecodeScheduleMaxTokens = 4;
constexpr int64_t kDecodeScheduleMaxPairs = 256;  // the expand's pre-wait route scan (kScanPairs)

// spec §4.4 PDL: expand CTAs per SM that still count as a "small" grid, at 128 columns per CTA.
constexpr int64_t kPdlExpandCols = 128;
constexpr int64_t kPdlSmallPerSmHopper = 12;
constexpr int64_t kPdlSmallPerSmBlackwell = 8;

/// CTAs of the per-route shrink per hidden split: one per pair and 8 rank rows (spec §4.1).
int64_t shrink_ctas(int64_t num_pairs, int64_t rank) {
  return core::checked_mul(num_pairs, rank / kRankTile, "num_pairs", "shrink CTAs");
}

}  // namespace

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

}  // namespace bgmv
}  // namespace cakemoe
