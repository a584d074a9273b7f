// Work of one sm90 GEMM CTA: blockIdx.x is the routing tile (spec §2.4 tables, written on the
// device by routing: graph-capturable, no host knowledge of per-expert counts), blockIdx.y the
// 128-row weight block. Tiles of one expert are consecutive in x, so CTAs that share a weight
// block run close together and reuse it from L2.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "stepfun/gemm_params.h"

namespace cakemoe {
namespace stepfun {
namespace sm90 {

struct TileWork {
  int32_t expert;     ///< local expert index
  int32_t m_block;    ///< 128-row weight block
  int64_t row_begin;  ///< first permuted row of the tile
  int64_t row_end;    ///< exclusive end of its valid rows
};

/// False when the CTA has no work: past num_non_exiting_ctas, or an expert outside [0, E_loc)
/// in a corrupted table.
CAKEMOE_DEVICE bool tile_work(const GemmTileTables& t, int64_t num_experts, TileWork* w) {
  const int64_t n = blockIdx.x;
  if (n >= *t.num_non_exiting_ctas) return false;
  const int32_t expert = t.batch[n];
  if (expert < 0 || expert >= num_experts) return false;
  w->expert = expert;
  w->m_block = static_cast<int32_t>(blockIdx.y);
  w->row_begin = n * t.tile;
  // NOTE: spec §2.4: mn_limit <= (n+1)*tile; clamped so a bad table cannot reach another tile.
  const int64_t limit = t.mn_limit[n];
  w->row_end = limit < w->row_begin + t.tile ? limit : w->row_begin + t.tile;
  return true;
}

}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
