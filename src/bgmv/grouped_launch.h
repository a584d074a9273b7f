// Launch interface of the pair-grouped pipeline (spec bgmv §5) and of the SM90 order-remap
// prologue (§6). Plain C++: the host runtime (cuda_plan.cpp) fills these and calls the launchers
// it finds in the kernel catalog ("bgmv", "grouped" | "order_build", dtype | "", rank 0).
#pragma once

#include <cstdint>

namespace cakemoe {
namespace bgmv {

/// Grouped shrink staging (GroupedParams::stage; the arithmetic is the same in every form).
constexpr int kGroupStageNone = 0;  ///< parts after the first re-read A through L1 / L2
constexpr int kGroupStageA = 1;     ///< A's 8 x H block in shared memory
constexpr int kGroupStageAX = 2;    ///< A and the first part's x rows in shared memory

/// Grouped pipeline operands. Workspace layout (int32 words, spec §5; sizes from
/// grouped_workspace()): header[4] (word 0 = tile count), bin_offset[bins + 1], tile_start
/// [max_tiles] (group_scan's scratch; spec §5 sizes it), sorted_routes[P], token_count[T],
/// token_slots[16 T], hist[hist_ctas * bins], cta_base[hist_ctas * bins], then 0-3 pad words,
/// tile_info[4 max_tiles] ({first route, routes, bin, 0} per tile, 16-byte aligned) and tile_rows
/// [32 P] (the shrink rows again as 16-bit values, R per sorted route, for the expand's one-trip
/// read). Zeroed once at prepare; every launch rewrites what it reads.
///
/// Two index forms with the same result: the one-CTA index kernel (fused_index, P <=
/// kGroupFusedIndexMaxPairs) or group_hist -> group_scan -> group_scatter.
struct GroupedParams {
  const void* x = nullptr;       ///< [T, H] bf16/fp16
  const void* lora_a = nullptr;  ///< [L, E, R, H]
  const void* lora_b = nullptr;  ///< [L, E, H, R]
  const int64_t* sorted_token_ids = nullptr;
  const int64_t* expert_ids = nullptr;
  const int64_t* lora_indices = nullptr;
  const float* topk_weights = nullptr;
  void* shrink_out = nullptr;  ///< [P, R] weight dtype
  float* y = nullptr;          ///< [T, H] with row stride y_row_stride
  int64_t y_row_stride = 0;
  int32_t* workspace = nullptr;
  float* partials = nullptr;  ///< [P, H] fp32 unweighted per-route partials
  int num_tokens = 0;
  int hidden = 0;
  int rank = 0;  ///< 8, 16, 32 or 64
  int num_pairs = 0;
  int num_loras = 0;
  int num_experts = 0;
  int splits = 1;  ///< hidden splits of the canonical shrink order (spec §3.2)
  int hist_ctas = 1;
  int max_tiles = 1;
  int fused_index = 0;  ///< 1: one-CTA index kernel
  /// What the grouped shrink stages in shared memory: kGroupStageNone, kGroupStageA (A's 8 x H
  /// block) or kGroupStageAX (A and the first part's x rows).
  int stage = kGroupStageNone;
  int pdl = 0;  ///< 1: every stage after the first is a programmatic dependent
  /// 1: sorted_routes[i] = token << 16 | pair (P <= 65536, T <= 32768), so the shrink finds a
  /// route's x row without a trip to sorted_token_ids; 0: the pair alone.
  int packed_routes = 0;
  /// 1: the combine drops each partials line from L2 after reading it, so the partials are never
  /// written back to HBM (needs 128-byte partial rows: H % 32 == 0).
  int discard_partials = 0;
};

/// Enqueues the index (one CTA, or group_hist, group_scan, group_scatter), the grouped shrink, the
/// grouped expand and the combine.
using GroupedLauncher = void (*)(const GroupedParams& params, void* stream);

/// Order-remap prologue operands (spec §6): one CTA writes `order[P]`, the pairs stably sorted
/// by (lora, expert) bin with invalid pairs (padding, LoRA -1) last.
struct OrderBuildParams {
  const int64_t* sorted_token_ids = nullptr;
  const int64_t* expert_ids = nullptr;
  const int64_t* lora_indices = nullptr;
  int32_t* order = nullptr;  ///< [P]
  int num_tokens = 0;
  int num_pairs = 0;  ///< <= 4096
  int num_loras = 0;
  int num_experts = 0;
};

using OrderBuildLauncher = void (*)(const OrderBuildParams& params, void* stream);

/// Grouped pipeline geometry shared by the host and the kernels.
constexpr int kGroupTileRoutes = 16;  ///< routes per tile (one bin)
constexpr int kGroupShrinkPart = 4;   ///< routes per grouped-shrink CTA
constexpr int kGroupHistThreads = 256;
constexpr int kGroupExpandCols = 256;  ///< columns (threads) per grouped-expand CTA
constexpr int kGroupTokenSlots = 16;
constexpr int kGroupIndexThreads = 1024;         ///< one-CTA index kernel
constexpr int kGroupFusedIndexMaxPairs = 16384;  ///< key[P] in its shared memory
constexpr int kGroupIndexSmemTokens = 16384;     ///< token counts in its shared memory
constexpr int kGroupCombineThreads = 256;
constexpr int kGroupShrinkThreads = 128;
constexpr int kGroupShrinkTileK = 1024;  ///< hidden elements per shrink k tile (128 threads x 8)
constexpr int kGroupRankTile = 8;        ///< shrink rank rows per CTA
/// Tiles per SIMT grouped-expand CTA: 2 measured best at ranks 16, 32 and 64 (1 and 4 lost
/// 1.001-1.22 in the sweep of bench/results/*_95aaa65_*); rank 8 takes the same.
constexpr int kGroupExpandTiles = 2;
/// Columns per SIMT grouped-expand thread (128-thread CTAs): one column lost 1.10 at rank 16.
constexpr int kGroupExpandThreadCols = 2;
/// Whether the grouped expand of a rank runs on tensor cores (grouped_expand_mma.cuh): ranks 32
/// and 64 (0.94-0.99 / 0.82-0.93 of the SIMT expand); ranks 8 / 16 keep the SIMT expand (rank 16
/// lost 1.01-1.05 on tensor cores). The planner reports it, the launcher instantiates by it.
constexpr bool grouped_tensor_core_expand(int rank) { return rank >= 32; }
/// sorted_routes packs token << 16 | pair while both fit (GroupedParams::packed_routes).
constexpr int64_t kPackedRoutesMaxPairs = 65536;
constexpr int64_t kPackedRoutesMaxTokens = 32768;

/// Dynamic shared memory of the grouped expand: `tiles` x 256 columns x R/8 16-byte vectors of B.
constexpr int64_t grouped_expand_smem_bytes(int rank, int tiles) {
  return static_cast<int64_t>(tiles) * (rank / 8) * kGroupExpandCols * 16;
}

/// Shared-memory slot (16-byte units) of vector g of column c's B row, kGroups = R/8 vectors per
/// row: rows one after another, the vector index XOR-swizzled so that the 8 columns c .. c + 7
/// (c a multiple of 8) read with the same g by one 128-byte LDS.128 wavefront fall in 8
/// different 16-byte bank groups (slot % 8). A permutation of [0, 256 kGroups).
template <int kGroups>
constexpr int grouped_expand_slot(int c, int g) {
  constexpr int kRowsPerLine = kGroups >= 8 ? 1 : 8 / kGroups;
  return c * kGroups + (g ^ ((c / kRowsPerLine) % kGroups));
}

/// Bytes of one 16-bit row as the grouped shrink stages it: whole k tiles, each thread's vectors
/// where only it reads them (no barrier between the copy and the arithmetic).
constexpr int64_t grouped_stage_row_bytes(int64_t hidden) {
  return (hidden + kGroupShrinkTileK - 1) / kGroupShrinkTileK * kGroupShrinkTileK * 2;
}
constexpr int kOrderBuildThreads = 1024;
constexpr int kOrderBuildMaxPairs = 4096;

}  // namespace bgmv
}  // namespace cakemoe
