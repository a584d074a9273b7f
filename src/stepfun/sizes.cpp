// Static routing buffer bounds (spec stepfun §2.5).
#include <cstdint>
#include <limits>
#include <string>

#include "cakemoe/stepfun.h"
#include "core/check.h"

namespace cakemoe {
namespace stepfun {
namespace {

void check_bound_args(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t tile) {
  core::require(num_tokens >= 0, "num_tokens", "must be >= 0, got " + std::to_string(num_tokens));
  core::require(top_k >= 0, "top_k", "must be >= 0, got " + std::to_string(top_k));
  core::require(num_experts > 0, "num_experts",
                "must be > 0, got " + std::to_string(num_experts));
  core::require(tile > 0, "tile_tokens_dim", "must be > 0, got " + std::to_string(tile));
  core::require(top_k == 0 || num_tokens <= std::numeric_limits<int32_t>::max() / top_k,
                "num_tokens", "num_tokens * top_k must fit in int32");
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
  return max_ctas(num_tokens, top_k, num_experts, tile) * tile;
}

}  // namespace stepfun
}  // namespace cakemoe
