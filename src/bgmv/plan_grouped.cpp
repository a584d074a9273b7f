// The pair-grouped pipeline and the order remap (spec bgmv §5, §6): when each is chosen, how a
// grouped plan runs on the GPU, and their workspaces.
#include <algorithm>
#include <string>

#include "bgmv/grouped_launch.h"
#include "bgmv/plan.h"
#include "bgmv/plan_limits.h"
#include "core/check.h"
#include "core/checked.h"

namespace cakemoe {
namespace bgmv {
namespace {

// spec §5 grouped pipeline (the bin and tile-row limits are in plan_limits.h).
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

int64_t group_hist_ctas(int64_t num_pairs) {
  return std::max<int64_t>(1,
                           std::min(kGroupHistCtasMax, ceil_div(num_pairs, kGroupHistPairsPerCta)));
}

int64_t group_max_tiles(int64_t num_pairs, int64_t bins) {
  return ceil_div(num_pairs, kGroupTileRoutes) + bins;
}

}  // namespace

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

}  // namespace bgmv
}  // namespace cakemoe
