// A whole Cake plan (spec bgmv §4-§7): choose_cake_plan combines the selectors and applies and
// checks the forced choices (PlanOverrides); the portable plan; how a choice prints.
#include <optional>
#include <ostream>
#include <string>

#include "bgmv/grouped_launch.h"
#include "bgmv/plan.h"
#include "bgmv/plan_limits.h"
#include "core/check.h"

namespace cakemoe {
namespace bgmv {

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

// spec §7 specialized bodies: schedules 0 (t64), 1 (token_owned) and 2 (dual_col).
constexpr int kSpecializedSchedules = 3;

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
