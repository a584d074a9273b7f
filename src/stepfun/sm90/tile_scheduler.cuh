// Work of one sm90 GEMM CTA: the routing tile (spec §2.4 tables, written on the device by
// routing: graph-capturable, no host knowledge of per-expert counts) and the 128-row weight block,
// from the linear CTA number (tile_config.h cta_coord: raster groups of tiles, weight block outer
// inside a group; the main units use groups of 1, i.e. weight block fastest).
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "stepfun/gemm_params.h"
#include "stepfun/sm90/tile_config.h"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

struct TileWork {
  int32_t expert;     ///< local expert index
  int32_t m_block;    ///< 128-row weight block
  int64_t row_begin;  ///< first permuted row of the tile
  int64_t row_end;    ///< exclusive end of its valid rows
};

/// The grid of `ctas` = token tiles x weight blocks CTAs: x up to 2^31 - 2 (even, so clusters of
/// two never straddle a row), y the rest.
struct LinearGrid {
  unsigned x, y;
};
CAKEMOE_HD constexpr LinearGrid linear_grid(int64_t ctas) {
  const int64_t x = ctas < 0x7ffffffe ? ctas : 0x7ffffffe;
  return {static_cast<unsigned>(x), static_cast<unsigned>((ctas + x - 1) / x)};
}

/// This CTA's linear number.
CAKEMOE_DEVICE int64_t linear_cta() {
  return static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
}

/// The work of linear CTA `id`; false when it has none: past the grid's tiles or
/// num_non_exiting_ctas, or an expert outside [0, E_loc) in a corrupted table. `group`:
/// tile_config.h cta_coord.
CAKEMOE_DEVICE bool tile_work_at(const GemmTileTables& t, int64_t num_experts, int32_t m_blocks,
                                 int group, int64_t id, TileWork* w) {
  const CtaCoord at = cta_coord(id, m_blocks, group);
  const int64_t n = at.tile;
  if (n >= t.max_ctas || n >= *t.num_non_exiting_ctas) return false;
  const int32_t expert = t.batch[n];
  if (expert < 0 || expert >= num_experts) return false;
  w->expert = expert;
  w->m_block = at.m_block;
  w->row_begin = n * t.tile;
  // NOTE: spec §2.4: mn_limit <= (n+1)*tile; clamped so a bad table cannot reach another tile.
  const int64_t limit = t.mn_limit[n];
  w->row_end = limit < w->row_begin + t.tile ? limit : w->row_begin + t.tile;
  return true;
}

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
