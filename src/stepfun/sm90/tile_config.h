// The constexpr tile table of the sm90 StepFun GEMMs (FC1, FC2), read by the kernels (pipeline
// depth, CTAs per SM), the unit generator and the planner's tests. Plain C++.
//
// A CTA computes a 128-row block of one expert's weights (FC1: 64 features = 64 up + 64 gate
// rows; FC2: 128 output columns) against one routing tile of `tile` token rows: weights are
// wgmma's M side, tokens its N side (N = tile, 8..256), so decode tiles need no padding.
#pragma once

#include <cstdint>
#include <string>

#include "cakemoe/stepfun.h"
#include "core/macros.h"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

constexpr int kBlockM = 128;    ///< weight rows per CTA (two consumer warpgroups of 64)
constexpr int kRowBytes = 128;  ///< bytes of one operand row per stage: one 128-byte swizzle row
constexpr int kThreads = 384;   ///< producer warpgroup + 2 consumer warpgroups
constexpr int kGatherThreads = 96;  ///< producer warps 1..3 copy token rows (warp 0 issues TMA)
constexpr int kConsumerWarps = 8;
constexpr int kConsumerThreads = 32 * kConsumerWarps;  ///< two consumer warpgroups
constexpr int kFc1Features = 64;                       ///< FC1 output features per CTA

/// Whether the family's sm90 unit dequantizes in registers (mainloop_rs_dequant.cuh).
CAKEMOE_HD constexpr bool is_dequant_family(Family family) {
  return family == Family::kNVFP4 || family == Family::kNVFP4BF16Tok || family == Family::kMXFP8;
}

/// Whether an sm90 unit exists for (family, tile). fp8 keeps a second accumulator for the
/// per-stage promotion, so its largest tile is 128 (256 would need 256 accumulator registers).
CAKEMOE_HD constexpr bool has_sm90_unit(Family family, int tile) {
  const bool ladder =
      tile == 8 || tile == 16 || tile == 32 || tile == 64 || tile == 128 || tile == 256;
  if (!ladder) return false;
  if (family == Family::kBF16) return true;
  if (family == Family::kFP8) return tile <= 128;
  if (is_dequant_family(family)) return tile <= 64;
  return false;
}

/// Shapes an sm90 unit of `family` takes beyond its tile: mxfp8 reads the linear FC1 scales
/// [T, H/32] in 4-byte pieces, so H must be a multiple of 128 (the planner and the stage binders
/// fall back to the portable unit otherwise).
CAKEMOE_HD constexpr bool sm90_supports_shape(Family family, int64_t hidden) {
  return family != Family::kMXFP8 || hidden % 128 == 0;
}

/// The sm90 plan's tile for `avg` = ceil(T*K / E_loc) routed rows per local expert: twice the
/// average rounded up to a power of two, clamped to [8, 64]. Measured on the H200 (FC1 + FC2,
/// H 4096, I 1536, E 64, bf16 and fp8, bench/results/2026-12-02_*_stepfun-sm90.md): avg 1 tile 8
/// = 16; avg 8 tile 16 0.90x of tile 8; avg 64 tile 64 0.90x of 32, 0.69x of 128; avg 256 tile 64
/// 0.86x of 32, 0.81x of 128, 0.67x of 256 (one CTA per SM above 64 leaves no overlap).
CAKEMOE_HD constexpr int preferred_tile(int64_t avg) {
  int tile = 8;
  while (tile < 64 && tile < 2 * avg) tile *= 2;
  return tile;
}

CAKEMOE_HD constexpr int ctas_per_sm(int tile) { return tile <= 64 ? 2 : 1; }

CAKEMOE_HD constexpr int a_stage_bytes() { return kBlockM * kRowBytes; }
CAKEMOE_HD constexpr int b_stage_bytes(int tile) { return tile * kRowBytes; }

/// Pipeline stages: as many as fit a per-CTA budget (2 CTAs per SM share 227 KB), at most 8.
CAKEMOE_HD constexpr int stages_for(int tile) {
  const int budget = ctas_per_sm(tile) == 2 ? 108 * 1024 : 216 * 1024;
  const int stages = budget / (a_stage_bytes() + b_stage_bytes(tile));
  return stages > 8 ? 8 : stages;
}

/// Bytes of the stage buffers; the epilogue's staging tile reuses them once the main loop ends.
CAKEMOE_HD constexpr int stage_region_bytes(int tile) {
  return stages_for(tile) * (a_stage_bytes() + b_stage_bytes(tile));
}

/// FC1 staging: fp32 [tile][64 + 4]; FC2 staging: bf16 [tile][128 + 8] (rows 16-byte aligned).
constexpr int kFc1StageStride = kFc1Features + 4;
constexpr int kFc2StageStride = kBlockM + 8;

/// Dynamic shared memory of one CTA: stages, 2 mbarriers per stage, the tile's row sources, and
/// 1 KB to align the stage buffers to the 1024-byte swizzle atom.
CAKEMOE_HD constexpr int smem_bytes(int tile) {
  return stage_region_bytes(tile) + stages_for(tile) * 16 + tile * 4 + 1024;
}

// ---- Dequantized families: nvfp4, nvfp4_bf16tok, mxfp8 (mainloop_rs_dequant.cuh) ----------------
// A stage is 128 K elements: the raw weights (128 rows x 64 bytes of e2m1 / 128 bytes of e4m3, TMA)
// and their 128x4 scale groups (512 bytes per 4 blocks: two groups of 16-element blocks, one of
// 32), and the tokens dequantized to f16 / bf16 (two 128-byte swizzle atoms per row). Raw token
// rows and their scales come through a cp.async ring.
constexpr int kDqStageK = 128;

CAKEMOE_HD constexpr bool dq_fp4(Family family) { return family != Family::kMXFP8; }
/// Raw bytes of one weight or token row per stage.
CAKEMOE_HD constexpr int dq_raw_row_bytes(Family family) { return dq_fp4(family) ? 64 : 128; }
/// K elements per scale block.
CAKEMOE_HD constexpr int dq_block_elems(Family family) { return dq_fp4(family) ? 16 : 32; }
/// 128x4 scale bytes of a 128-row weight block per stage.
CAKEMOE_HD constexpr int dq_weight_scale_bytes(Family family) {
  return kDqStageK / dq_block_elems(family) / 4 * 512;
}
/// Scale bytes of one token row per stage.
CAKEMOE_HD constexpr int dq_token_scale_bytes(Family family) {
  return kDqStageK / dq_block_elems(family);
}

CAKEMOE_HD constexpr int dq_a_stage_bytes(Family family) {
  return kBlockM * dq_raw_row_bytes(family) + dq_weight_scale_bytes(family);
}
CAKEMOE_HD constexpr int dq_b_stage_bytes(int tile) { return tile * kDqStageK * 2; }
CAKEMOE_HD constexpr int dq_ring_slots(int tile) { return tile >= 64 ? 3 : 4; }
CAKEMOE_HD constexpr int dq_ring_slot_bytes(Family family, int tile) {
  return tile * (dq_raw_row_bytes(family) + dq_token_scale_bytes(family));
}

CAKEMOE_HD constexpr int dq_stages_for(Family family, int tile) {
  const int budget = 108 * 1024 - dq_ring_slots(tile) * dq_ring_slot_bytes(family, tile);
  const int stages = budget / (dq_a_stage_bytes(family) + dq_b_stage_bytes(tile));
  return stages > 8 ? 8 : stages;
}

CAKEMOE_HD constexpr int dq_stage_region_bytes(Family family, int tile) {
  return dq_stages_for(family, tile) * (dq_a_stage_bytes(family) + dq_b_stage_bytes(tile));
}

CAKEMOE_HD constexpr int dq_smem_bytes(Family family, int tile) {
  return dq_stage_region_bytes(family, tile) +
         dq_ring_slots(tile) * dq_ring_slot_bytes(family, tile) + dq_stages_for(family, tile) * 16 +
         dq_ring_slots(tile) * 16 + tile * 4 + 1024;
}

// ---- CTA order ---------------------------------------------------------------------------------
// CTAs are numbered in raster groups of `group` token tiles: inside a group the weight block is
// the outer index and the tile the inner one, so a group's tiles read each weight block together
// (one DRAM read when they share an expert) while their token rows stay in L2 across the blocks.
// group 1 is weight block fastest per tile (the main units); the "g8" variant units use 8.

struct CtaCoord {
  int64_t tile;     ///< routing tile (>= max_ctas: no work)
  int32_t m_block;  ///< 128-row weight block
};

CAKEMOE_HD constexpr CtaCoord cta_coord(int64_t id, int32_t m_blocks, int group) {
  const int64_t per_group = int64_t{group} * m_blocks;
  const int64_t g = id / per_group, rem = id % per_group;
  return {g * group + rem % group, static_cast<int32_t>(rem / group)};
}

/// CTAs launched for `max_ctas` tiles: whole groups.
CAKEMOE_HD constexpr int64_t grid_ctas(int64_t max_ctas, int32_t m_blocks, int group) {
  return (max_ctas + group - 1) / group * group * m_blocks;
}

/// The (family, tile) of the prefill variant of the SS units (g8): bf16 and fp8 at tile 64,
/// the prefill tile, where FC1 is bound by L2 and re-reads each weight block from DRAM about 4
/// times (docs/performance/stepfun.md).
CAKEMOE_HD constexpr bool is_ss_prefill_tile(Family family, int tile) {
  return (family == Family::kBF16 || family == Family::kFP8) && tile == 64;
}

/// Whether the raster-group variant (tiles per group `kRasterGroup`) exists for (family, tile).
constexpr int kRasterGroup = 8;
CAKEMOE_HD constexpr bool has_sm90_group_unit(Family family, int tile) {
  return is_ss_prefill_tile(family, tile);
}

// ---- Persistent SS units (the "p" variant, gemm_persistent.cuh) --------------------------------
// As many CTAs as fit the SMs for the whole grid (two per SM up to tile 64, one at 128); each
// walks its share of the (tile, weight block) work, carrying the stage pipeline from one item to
// the next, so the next item's weight and token loads run while the consumers finish the last one
// (epilogue, stores) and no CTA pays a launch, barrier init and pipeline fill per item. The
// epilogue stages its tile in a region of its own (the stage buffers stay in use).

/// Whether the persistent variant exists for (family, tile): bf16 / fp8 at the decode tiles 8..32,
/// where a CTA streams 0.5-1 MB of weights and its fixed costs are a visible share, and at the
/// prefill tiles 64 / 128 (tile 128 with one CTA per SM measured 0.69x of tile 64 in the main
/// units, which cannot overlap an epilogue with the next tile's loads).
CAKEMOE_HD constexpr bool has_sm90_persistent_unit(Family family, int tile) {
  return (family == Family::kBF16 || family == Family::kFP8) &&
         (tile == 8 || tile == 16 || tile == 32 || tile == 64 || tile == 128);
}

/// The raster group of a persistent unit's walk: the main units' order at the decode tiles, the
/// "g8" units' groups of 8 tiles at prefill.
CAKEMOE_HD constexpr int p_group(int tile) { return tile >= 64 ? kRasterGroup : 1; }

/// The epilogue's staging tile: FC1 fp32 [tile][68], FC2 bf16 [tile][136], 272 bytes a row.
CAKEMOE_HD constexpr int p_staging_bytes(int tile) { return tile * kFc1StageStride * 4; }
static_assert(kFc1StageStride * 4 == kFc2StageStride * 2, "one staging size for both stages");

/// Stages of a persistent CTA: what fits its share of the SM (ctas_per_sm) beside the staging tile.
CAKEMOE_HD constexpr int p_stages_for(int tile) {
  const int share = ctas_per_sm(tile) == 2 ? 108 * 1024 : 216 * 1024;
  const int budget = share - p_staging_bytes(tile) - tile * 4 - 16 - 1024;
  const int stages = budget / (a_stage_bytes() + b_stage_bytes(tile) + 16);
  return stages > 8 ? 8 : stages;
}

/// Stages and their barriers, the row sources, the staging tile on a 16-byte boundary, and 1 KB
/// to align the stage buffers to the 1024-byte swizzle atom.
CAKEMOE_HD constexpr int p_smem_bytes(int tile) {
  return p_stages_for(tile) * (a_stage_bytes() + b_stage_bytes(tile) + 16) + tile * 4 + 16 +
         p_staging_bytes(tile) + 1024;
}

// ---- mxfp8 on e4m3 wgmma with per-block promotion (mainloop_mx.cuh, the "e4m3" variant) -------
// A stage is 128 K elements as in the SS path (weights by TMA, token rows gathered raw, both
// 128-byte swizzled) plus the weights' 128x4 scale group (512 bytes) and 4 scale bytes per token
// row. Two CTAs per SM.

/// Whether the e4m3 variant exists for (family, tile): mxfp8 at tile 8 only. Its promotion costs
/// N/2 multiplies and N/2 multiply-adds per k32 block; SASS of the FC1 stage loop (nvcc 13.0):
/// tile 8 261 instructions against the dequant's 327, tile 16 366 vs 336, tile 32 554 vs 336.
CAKEMOE_HD constexpr bool has_sm90_e4m3_unit(Family family, int tile) {
  return family == Family::kMXFP8 && tile == 8;
}

CAKEMOE_HD constexpr int mx_stage_bytes(int tile) {
  return a_stage_bytes() + b_stage_bytes(tile) + 512 + tile * 4;
}
CAKEMOE_HD constexpr int mx_stages_for(int tile) {
  const int stages = 108 * 1024 / mx_stage_bytes(tile);
  return stages > 8 ? 8 : stages;
}
CAKEMOE_HD constexpr int mx_smem_bytes(int tile) {
  return mx_stages_for(tile) * (mx_stage_bytes(tile) + 16) + tile * 4 + 1024;
}

// ---- The default sm90 plan: tile and unit variant per family and rows per expert ---------------

/// The units an sm90 plan runs: the main ones, or a variant above (catalog KernelUnit::variant).
enum class Sm90Variant : uint8_t { kMain, kE4m3, kG8, kPersistent };

/// The catalog's variant string of `v` ("" for the main units).
CAKEMOE_HD constexpr const char* sm90_variant_name(Sm90Variant v) {
  return v == Sm90Variant::kE4m3        ? "e4m3"
         : v == Sm90Variant::kG8         ? "g8"
         : v == Sm90Variant::kPersistent ? "p"
                                         : "";
}

struct Sm90Choice {
  int tile;
  Sm90Variant variant;
};

/// The units an sm90 stage of `family` runs at `tile` unless a plan names others (the default
/// plan, the per-stage API without a kernel name, the catalog's first sm90 unit): a variant where
/// it measured faster than the main unit of its tile in the same run (H200, 896baa4,
/// bench_stepfun_gemm H 4096 I 1536 E 64 K 8, FC1 + FC2;
/// bench/results/2026-12-02_896baa4_stepfun-variants.md): mxfp8 tile 8 "e4m3" 0.81-0.87x the
/// time of the dequant unit (T 8 / 64 / 512), bf16 / fp8 tile 64 "g8" 0.90-1.00x at T 4096 and
/// 16384.
CAKEMOE_HD constexpr Sm90Variant sm90_tile_variant(Family family, int tile) {
  if (has_sm90_e4m3_unit(family, tile)) return Sm90Variant::kE4m3;
  if (has_sm90_group_unit(family, tile)) return Sm90Variant::kG8;
  return Sm90Variant::kMain;
}

/// Whether plans_for offers the plans of the variant named `name` (KernelUnit::variant), and so
/// the opt-in autotune measures them: every variant but those compiled and not yet run on a GPU
/// ("p"), which stay reachable by name (sm90_variant_plan, the benches, the GPU tests).
inline bool sm90_variant_offered(const std::string& name) {
  return name != sm90_variant_name(Sm90Variant::kPersistent);
}

/// The default sm90 plan of `family` at avg = ceil(T*K / E_loc) routed rows per local expert:
/// the measured tile (preferred_tile) on that tile's units (sm90_tile_variant).
CAKEMOE_HD constexpr Sm90Choice sm90_choice(Family family, int64_t avg) {
  const int tile = preferred_tile(avg);
  return {tile, sm90_tile_variant(family, tile)};
}

/// Byte offset, inside a stage's 128x4 weight scales, of the first scale of K elements
/// [32q, 32q + 32) of row `r` (0..127) of the 128-row block: nvfp4 blocks 2q, 2q + 1 (adjacent),
/// mxfp8 block q. The 128x4 layout keeps (r % 32) * 16 + (r / 32) * 4 + (block % 4) inside each
/// 512-byte group of 4 blocks (formats/layouts.h sf_offset_128x4).
CAKEMOE_HD constexpr int dq_weight_scale_offset(Family family, int r, int q) {
  const int block = dq_fp4(family) ? 2 * q : q;
  return (block / 4) * 512 + (r % 32) * 16 + (r / 32) * 4 + block % 4;
}

/// Byte offset of 16-byte chunk `c` (0..7 for e4m3, 0..3 for e2m1) of row `r` in a stage's raw
/// weight box: e2m1 rows (64 B) unswizzled, e4m3 rows (128 B) in the 128-byte swizzle.
CAKEMOE_HD constexpr int dq_weight_chunk_offset(Family family, int r, int c) {
  return dq_fp4(family) ? r * 64 + 16 * c : r * 128 + ((c ^ (r % 8)) << 4);
}

/// The wgmma K position (0..127) of K element `p` (0..127) of an nvfp4 stage. A consumer thread
/// of lane quad q decodes elements [32q, 32q + 32) of its rows, one 32-bit word of 8 elements at a
/// time, into f16 pairs (element i, element i + 4); word j feeds k16 steps 2j and 2j + 1, whose A
/// fragment takes k (2q, 2q + 1) and (2q + 8, 2q + 9). The tokens are stored in this order, so
/// every weight element meets its own token element.
CAKEMOE_HD constexpr int dq_logical_k(int p) {
  const int q = p / 32, j = (p % 32) / 8, rem = p % 8;
  return 16 * (2 * j + (rem % 4) / 2) + 8 * (rem % 2) + 2 * q + rem / 4;
}

/// The FC1 feature (0..63 within the CTA) whose up and gate accumulators a consumer thread holds:
/// rows r and r + 8 of its 16-row group (spec §4.4 (a)+(b)). `group` is the consumer warpgroup
/// (0, 1), `warp` the warp in it (0..3).
CAKEMOE_HD constexpr int fc1_lane_feature(int group, int warp, int lane) {
  return 16 * (2 * group + warp / 2) + 2 * (lane / 4) + warp % 2;
}

/// The FC2 output column (0..127 within the CTA) of physical W2 row `row` of the block (§4.4 (b)
/// keeps every aligned 32-row block on its own rows).
CAKEMOE_HD constexpr int fc2_row_column(int row) {
  return (row / 32) * 32 + 4 * (row % 8) + (row % 32) / 8;
}

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
