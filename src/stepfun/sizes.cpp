// Static routing buffer bounds (spec stepfun §2.5).
#include <cstdint>
#include <string>

#include "cakemoe/stepfun.h"
#include "core/check.h"
#include "core/checked.h"

namespace cakemoe {
namespace stepfun {
namespace {

void check_bound_args(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t tile) {
  core::require_in_range(num_tokens, 0, kMaxNumTokens, "num_tokens", "num_tokens");
  core::require_in_range(top_k, 0, kMaxTopK, "top_k", "top_k");
  core::require_in_range(num_experts, 1, kMaxNumExperts, "num_experts", "num_experts");
  core::require_in_range(tile, 1, kMaxTileTokensDim, "tile_tokens_dim", "tile_tokens_dim");
}

}  // namespace

int64_t max_ctas(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t tile) {
  check_bound_args(num_tokens, top_k, num_experts, tile);
  // NOTE: spec §2.5: each non-empty expert costs one (possibly partial) tile; the pairs beyond
  // one per expert fill at most floor(rest / tile) further full tiles.
  const int64_t pairs = num_tokens * top_k;
  const int64_t rest = pairs > num_experts ? pairs - num_experts : 0;
  return (pairs < num_experts ? pairs : num_experts) + rest / tile;
}

int64_t max_padded(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t tile) {
  return core::checked_mul(max_ctas(num_tokens, top_k, num_experts, tile), tile, "tile_tokens_dim",
                           "max_padded");
}

}  // namespace stepfun
}  // namespace cakemoe
