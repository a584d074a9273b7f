// Launch interface of the pair-grouped pipeline (spec bgmv §5) and of the SM90 order-remap
// prologue (§6). Plain C++: the host runtime (cuda_plan.cpp) fills these and calls the launchers
// it finds in the kernel catalog ("bgmv", "grouped" | "order_build", dtype | "", rank 0).
#pragma once

#include <cstdint>

namespace cakemoe {
namespace bgmv {

/// Grouped pipeline operands. Workspace layout (int32 words, spec §5; sizes from
/// grouped_workspace()): header[4] (word 0 = tile count), bin_offset[bins + 1], tile_start
/// [max_tiles], sorted_routes[P], token_count[T], token_slots[16 T], hist[hist_ctas * bins],
/// cta_base[hist_ctas * bins], tile_info[4 max_tiles] ({first route, routes, bin, 0} per tile),
/// token_weights[16 T] (fp32 bits; one-CTA index only: the weights of the token's slots, which
/// that index sorts ascending), sorted_bins[P] (one-CTA index only: the bin of sorted_routes[i]). Zeroed once at prepare; every launch rewrites what it reads.
///
/// Two index forms: the one-CTA index kernel (fused_index, P <= kGroupFusedIndexMaxPairs) or
/// group_hist -> group_scan -> group_scatter. Two expand forms: the slab expand (slab_cols > 0:
/// a CTA owns slab_cols columns of every token, keeps the per-route partials of its columns in
/// shared memory and combines them itself; needs the one-CTA index) or grouped expand (fp32
/// partials [P, H] in `partials`) -> combine. Both give the same bits (docs/decisions/bgmv.md).
struct GroupedParams {
  const void* x = nullptr;       ///< [T, H] bf16/fp16
  const void* lora_a = nullptr;  ///< [L, E, R, H]
  const void* lora_b = nullptr;  ///< [L, E, H, R]
  const int64_t* sorted_token_ids = nullptr;
  const int64_t* expert_ids = nullptr;
  const int64_t* lora_indices = nullptr;
  const float* topk_weights = nullptr;
  void* shrink_out = nullptr;   ///< [P, R] weight dtype
  float* y = nullptr;           ///< [T, H] with row stride y_row_stride
  int64_t y_row_stride = 0;
  int32_t* workspace = nullptr;
  float* partials = nullptr;    ///< [P, H] fp32 unweighted per-route partials
  int num_tokens = 0;
  int hidden = 0;
  int rank = 0;                 ///< 8, 16, 32 or 64
  int num_pairs = 0;
  int num_loras = 0;
  int num_experts = 0;
  int splits = 1;               ///< hidden splits of the canonical shrink order (spec §3.2)
  int hist_ctas = 1;
  int max_tiles = 1;
  int slab_cols = 0;    ///< 4, 8 or 16: slab expand; 0: grouped expand + combine
  int fused_index = 0;  ///< 1: one-CTA index kernel
  int stage_a = 0;      ///< 1: the grouped shrink stages its 8 x H rank block of A in smem
  int pdl = 0;          ///< 1: every stage after the first is a programmatic dependent
};

/// Enqueues group_hist, group_scan, group_scatter, grouped shrink, grouped expand, combine.
using GroupedLauncher = void (*)(const GroupedParams& params, void* stream);

/// Order-remap prologue operands (spec §6): one CTA writes `order[P]`, the pairs stably sorted
/// by (lora, expert) bin with invalid pairs (padding, LoRA -1) last.
struct OrderBuildParams {
  const int64_t* sorted_token_ids = nullptr;
  const int64_t* expert_ids = nullptr;
  const int64_t* lora_indices = nullptr;
  int32_t* order = nullptr;  ///< [P]
  int num_tokens = 0;
  int num_pairs = 0;         ///< <= 4096
  int num_loras = 0;
  int num_experts = 0;
};

using OrderBuildLauncher = void (*)(const OrderBuildParams& params, void* stream);

/// Grouped pipeline geometry shared by the host and the kernels.
constexpr int kGroupTileRoutes = 16;   ///< routes per tile (one bin)
constexpr int kGroupShrinkPart = 4;    ///< routes per grouped-shrink CTA
constexpr int kGroupHistThreads = 256;
constexpr int kGroupExpandCols = 256;  ///< columns per grouped-expand / combine CTA
constexpr int kGroupTokenSlots = 16;
constexpr int kGroupIndexThreads = 1024;           ///< one-CTA index kernel
constexpr int kGroupFusedIndexMaxPairs = 16384;    ///< key[P] in its shared memory
constexpr int kGroupSlabThreads = 256;
constexpr int kGroupSlabMaxSmem = 200 * 1024;      ///< P x slab_cols fp32 partials
constexpr int kGroupStageAMaxBytes = 112 * 1024;   ///< 8 x H x 2 bytes (H <= 7168)
constexpr int kOrderBuildThreads = 1024;
constexpr int kOrderBuildMaxPairs = 4096;

}  // namespace bgmv
}  // namespace cakemoe
