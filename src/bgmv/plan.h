// BGMV host selectors (spec bgmv §4.1, §4.3, §4.4, §5, §6, §7, §9) and workspace sizes (§3.3, §5).
// Plain C++: no CUDA types, testable on the CPU. These are FlashInfer's measured heuristics; the
// attribute values they produce are part of the plan's observable contract. Defined by topic in
// plan_generic.cpp, plan_variant.cpp, plan_grouped.cpp and plan_choice.cpp.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "cakemoe/bgmv.h"

namespace cakemoe {
namespace bgmv {

/// Compiled architecture of a device (exact match only; spec §7 support set).
enum class Arch : uint8_t { kSm90a, kSm100a, kSm103a, kOther };
const char* arch_name(Arch arch);
/// (9,0) -> sm90a, (10,0) -> sm100a, (10,3) -> sm103a, anything else -> other.
Arch arch_from_capability(int major, int minor);
bool is_blackwell(Arch arch);

enum class Variant : uint8_t { kGeneric, kSpecialized, kPortable };
const char* variant_name(Variant variant);  ///< "generic" | "specialized" | "portable"

/// Compute capability of a CUDA device, for the first §9 rule.
struct Capability {
  int major = 0;
  int minor = 0;
};

// ---- Selectors ----------------------------------------------------------------------------------

/// SM90 decode sizes (P <= 48 pairs and P * R / 8 <= 96 shrink CTAs) where the generic plan takes
/// the register shrink with one split: kRegistersQuarterBlock (2-row blocks) while P * R / 2 <= 64,
/// kRegistersHalfBlock (4-row blocks) while P * R / 4 <= 64, else kRegisters.
bool register_shrink_region(int64_t num_pairs, int64_t rank, Arch arch);
/// The generic plan's shrink (and the splits every variant uses, so their bits agree): spec
/// §4.1's rule (select_generic_shrink), except on SM90 (cakemoe deviations, measured): a register
/// kind with one split in the register-shrink region, kRegistersOneTile from 384 shrink CTAs
/// (P * R / 8), and below that kRegisters with spec's splits at rank 64 and at rank 32 with
/// H >= 4096.
ShrinkLaunch plan_generic_shrink(int64_t num_pairs, int64_t rank, int64_t hidden, Arch arch);
/// spec §4.1: generic shrink (kRing2Stage or kRing3Stage, splits) for P pairs, rank R, hidden H.
ShrinkLaunch select_generic_shrink(int64_t num_pairs, int64_t rank, int64_t hidden, Arch arch);
/// spec §7: the shapes that have a specialized body (H in {2688, 3072}, R == 32).
bool is_specialized_shape(int64_t hidden, int64_t rank);
/// spec §7 (newest JIT): Blackwell specialized for a specialized shape and 32 <= T <= 1024. SM90
/// (cakemoe, from SM90 measurements; spec §7's "SM90 never" predates a specialized body that wins
/// there): inside plan_variant.cpp's kSm90SpecializedWindows, T <= 8 or (T >= 9 and 64 <= P), both
/// with P <= 1024. `specialized_built` false (no specialized unit compiled) forces generic.
Variant select_variant(int64_t num_tokens, int64_t num_pairs, int64_t hidden, int64_t rank,
                       Arch arch, bool specialized_built);
/// spec §4.3/§7 generic schedule: 0 (t64) for T <= 8, else 1 (t128).
int select_generic_schedule(int64_t num_tokens);
/// The generic plan's expand schedule: spec's, except on SM90 at T <= 8 (cakemoe deviations,
/// measured): the decode schedule (2) at T <= 4 with >= 8 routes per token and rank <= 32, or at
/// T 1 with >= 6 routes and rank >= 32 (P <= 256 both); else the wide schedule (1) unless rank
/// 64 with more than two routes per token.
int plan_generic_schedule(int64_t num_tokens, int64_t num_pairs, int64_t rank, Arch arch);
/// Specialized schedule: 0 t64, 1 token_owned, 2 dual_col. spec §7's Blackwell table off SM90; on
/// SM90 the measured best: 2 for T >= 64, else 0 when P >= 4 T (top-k >= 4), else 1.
int select_specialized_schedule(int64_t num_tokens, int64_t num_pairs, int64_t hidden, Arch arch);
/// spec §4.4: 0 plain, 1 early, 2 late.
int select_pdl_mode(Variant variant, int64_t num_tokens, int64_t hidden, Arch arch, int num_sms);
/// The PDL mode the per-route pair launches with (PlanChoice::launch_pdl_mode; both variants):
/// 1 (early) at every size on SM90, where it measured faster than §4.4's plain launches
/// above its small-grid limit (T 128-512: 0.91-0.98); elsewhere §4.4's generic rule.
int select_launch_pdl_mode(int64_t num_tokens, int64_t hidden, Arch arch, int num_sms);
/// spec §5: heuristic for the pair-grouped pipeline (grouped = None).
bool select_grouped(int64_t num_pairs, int64_t num_tokens, int64_t num_loras, int64_t num_experts,
                    int64_t hidden, int64_t rank);
/// cakemoe's grouped heuristic on SM90, from measurements of every pipeline on the same inputs
/// (bench_bgmv --variants; bench/NOTES.md), replacing spec §5's Blackwell rule there.
bool select_grouped_sm90(int64_t num_pairs, int64_t num_tokens, int64_t num_loras,
                         int64_t num_experts, int64_t rank);
/// spec §6: heuristic for the SM90 shrink order remap (order_remap = None, grouped not chosen).
/// cakemoe does not apply it by default: on SM90 the remap never paid for its prologue
/// (choose_cake_plan leaves order_remap off unless forced; bench/NOTES.md).
bool select_order_remap(int64_t num_pairs, int64_t num_tokens, int64_t num_loras,
                        int64_t num_experts, int64_t hidden, int64_t rank, Arch arch);

// ---- Cake support set (spec §9) -----------------------------------------------------------------

struct SupportQuery {
  std::optional<Capability> capability;  ///< absent: the device rule is skipped (CPU backend)
  /// False when the driver does not load this build's native code on the device although its
  /// capability is SM90 / SM100 / SM103 (CUDA_FORCE_PTX_JIT=1): the Cake units cannot run there.
  bool native_code_loads = true;
  int64_t num_slices = 1;
  int64_t rank = 0;
  int64_t hidden = 0;
  int64_t feat_out = 0;
};
/// The first §9 rule an input breaks: the argument it concerns and the reason text; both empty
/// when the input is inside the Cake support set.
struct CakeSupport {
  std::string argument;
  std::string reason;
  bool supported() const { return reason.empty(); }
};
CakeSupport cake_support(const SupportQuery& query);
/// The §9 warning text for a reason.
std::string fallback_warning(const std::string& reason);

// ---- Workspaces ---------------------------------------------------------------------------------

/// spec §3.3 route index layout (int32 words): header, per-token counters and slots, split-K
/// region.
struct RouteIndexLayout {
  static constexpr int64_t kHeaderWords = 4;
  static constexpr int64_t kSlotsPerToken = 16;
  static constexpr int64_t kMaxSplits = 8;
  static constexpr int64_t kMaxSplitPairs = 128;
  static constexpr int64_t kMaxSplitRank = 64;
  int64_t count = 0;           ///< count[T]
  int64_t base_even = 0;       ///< base_even[T]
  int64_t base_odd = 0;        ///< base_odd[T]
  int64_t slots = 0;           ///< slots[T][16]
  int64_t split_partials = 0;  ///< fp32 [8][128][64]
  int64_t split_counters = 0;  ///< u32 [128][8]
  int64_t total_words = 0;
};
RouteIndexLayout route_index_layout(int64_t num_tokens);

/// How the grouped pipeline runs on the GPU (cakemoe's choice, docs/decisions/bgmv-gpu-runtime.md):
/// the one-CTA index (P <= 16384) or hist -> scan -> scatter, what the grouped shrink stages in
/// shared memory (kGroupStageNone, kGroupStageA: A's 8 x H block, kGroupStageAX: A and the first
/// part's x rows), how sorted_routes is stored, whether the combine drops the partials from L2,
/// and which expand runs (tensor cores at ranks 32 / 64, grouped_tensor_core_expand()).
struct GroupedGeometry {
  bool fused_index = false;
  int stage = 0;
  /// sorted_routes entries hold token << 16 | pair (P <= 65536, T <= 32768), else the pair.
  bool packed_routes = false;
  /// The combine discards each partials line from L2 after reading it (128-byte partial rows:
  /// H % 32 == 0), so the partials are never written back to HBM.
  bool discard_partials = false;
  /// The expand runs on tensor cores: per-route partials within fp32 rounding of the canonical
  /// order (y within 1e-5 of the CPU engine's, spec §3.2), replays still bitwise identical.
  bool tensor_core_expand = false;
};
/// `index_override` 0 / 1 forces hist -> scan -> scatter / the one-CTA index (tests, benches);
/// -1 picks. InvalidArgument("grouped_index") when the one-CTA index is forced past 16384 pairs.
/// `bins` (L * E; 0 = unknown) picks the staging form where both fit: A alone (stage 1, 4 CTAs per
/// SM) from 6 routes per bin on, A and x (stage 2, 3 CTAs per SM) below (SM90 measurements).
/// Sets fused_index and stage only (choose_cake_plan fills the rest).
GroupedGeometry grouped_geometry(int64_t num_pairs, int64_t hidden, int index_override = -1,
                                 int64_t bins = 0);

/// spec §5 grouped workspace: int32 words (with cakemoe's tile_info, see grouped_launch.h) and the
/// fp32 per-route partials [P, H].
struct GroupedWorkspace {
  int64_t bins = 0;
  int64_t hist_ctas = 0;
  int64_t max_tiles = 0;
  int64_t int_words = 0;
  int64_t partial_floats = 0;
};
GroupedWorkspace grouped_workspace(int64_t num_pairs, int64_t num_tokens, int64_t num_loras,
                                   int64_t num_experts, int64_t hidden);

/// spec §6 order workspace: one int32 per pair.
inline int64_t order_workspace_words(int64_t num_pairs) { return num_pairs; }

// ---- A whole choice -----------------------------------------------------------------------------

/// Everything the host picks for one problem (spec §4-§7); printed under CAKEMOE_PRINT_PLAN=1.
struct PlanChoice {
  Variant variant = Variant::kGeneric;
  std::optional<ShrinkLaunch> shrink_launch;
  bool grouped = false;
  bool order_remap = false;
  int pdl_mode = 0;
  std::optional<int> schedule_id;
  std::string fallback_reason;
  /// Hidden splits the shrink runs: shrink_launch->splits, or for the specialized variant (whose
  /// shrink_launch is unset, spec §1) the generic selector's, so both variants give equal bits.
  int shrink_splits = 1;
  /// PDL mode the per-route kernels launch with (select_launch_pdl_mode; the order remap keeps
  /// pdl_mode): pdl_mode reports spec §4.4's choice (0 for the specialized variant), while on
  /// SM90 the kernels chain early at every size (docs/decisions/bgmv-gpu-kernels.md).
  int launch_pdl_mode = 0;
  /// Grouped plans: how the pipeline runs on the GPU (the CUDA setup copies it, re-deciding
  /// nothing).
  GroupedGeometry geometry;
};
std::ostream& operator<<(std::ostream& os, const PlanChoice& choice);

/// Forced plan choices, internal (tests and benchmarks pass them to detail::prepare_impl; no
/// environment variable sets them; docs/decisions/bgmv-overrides.md). Each forces a choice that
/// some default plan makes, so every forced plan runs code the defaults run too; unset: the
/// planner's choice. Invalid values raise InvalidArgument naming the field.
struct PlanOverrides {
  /// kGeneric / kSpecialized: that variant (kSpecialized: InvalidArgument("variant") outside the
  /// specialized shapes); kPortable: the portable path inside the Cake support set.
  std::optional<Variant> variant;
  std::optional<int> specialized_schedule;  ///< 0 t64, 1 token_owned, 2 dual_col
  std::optional<ShrinkLaunch> shrink;       ///< the generic shrink's kind and splits
  std::optional<int> generic_schedule;      ///< 0 narrow, 1 wide, 2 decode
  std::optional<int> launch_pdl_mode;       ///< 0 plain, 1 early, 2 late (the bits never change)
  std::optional<bool> fused_index;          ///< grouped index: one CTA (true) or hist -> scatter
  std::optional<int> grouped_stage;         ///< grouped shrink staging 0, 1, 2 (where it fits H)
  std::optional<bool> packed_routes;        ///< false: pair ids alone (the form past 65536 pairs)
};

struct ProblemDesc {
  int64_t num_tokens = 0;
  int64_t num_pairs = 0;
  int64_t hidden = 0;
  int64_t rank = 0;
  int64_t num_loras = 0;
  int64_t num_experts = 0;
  Arch arch = Arch::kSm90a;
  int num_sms = 132;
  bool specialized_built = false;
  std::optional<bool> grouped;      ///< forced value, or heuristic when unset
  std::optional<bool> order_remap;  ///< forced value, or heuristic when unset
  PlanOverrides overrides;
};
/// The Cake choice for a problem inside the support set. Throws InvalidArgument("order_remap")
/// when order_remap is forced together with grouped or the specialized variant (spec §10 rule 15),
/// and InvalidArgument("grouped" / "order_remap") when a forced pipeline exceeds its kernel limits.
/// Overrides: a forced specialized variant raises InvalidArgument("variant") outside the
/// specialized shapes, InvalidArgument("grouped" / "order_remap") when that pipeline is forced
/// too, and Unsupported("variant") when its unit is not built; variant kPortable raises
/// InvalidArgument("variant") here (prepare takes the portable path before planning);
/// specialized_schedule raises InvalidArgument("schedule_id") outside 0..2 or on a plan that is
/// not specialized, generic_schedule outside 0..2; shrink raises InvalidArgument("shrink_launch")
/// for splits outside 1..8, splits > 1 with more than 128 pairs, or a half / quarter block with
/// splits > 1; launch_pdl_mode raises InvalidArgument("launch_pdl_mode") outside 0..2;
/// fused_index, grouped_stage and packed_routes raise InvalidArgument("grouped_index" /
/// "grouped_stage" / "packed_routes") where the form does not fit the problem.
PlanChoice choose_cake_plan(const ProblemDesc& problem);
/// A pipeline the caller forced on (grouped or order_remap = true): each exists
/// only in the generic variant, so the selector keeps such a plan generic.
bool generic_pipeline_forced(const ProblemDesc& problem);
/// The portable choice (spec §9): no schedule, no shrink launch, reason recorded.
PlanChoice choose_portable_plan(const std::string& reason);

}  // namespace bgmv
}  // namespace cakemoe
