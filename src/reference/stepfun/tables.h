// CPU reference of the StepFun permutation tables (spec stepfun §2.3-§2.5): token-order ranks,
// per-expert padded segments, CTA tables and the routing tail. Bitwise oracle of the GPU routers.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/stepfun/routing.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

/// Value written into every tail entry when RoutingConfig::poison_tail is set (0xDEADBEEF).
constexpr int32_t kTailPoison = static_cast<int32_t>(0xDEADBEEFu);

/// Entry counts the tables need for a config (§2.5 bounds with the global E).
struct TableSizes {
  int64_t expanded = 0;     ///< T*K: expanded_idx_to_permuted_idx
  int64_t max_ctas = 0;     ///< cta_idx_xy_to_batch_idx, cta_idx_xy_to_mn_limit
  int64_t max_padded = 0;   ///< permuted rows; permuted_idx_to_token_idx holds max_padded + 1
};
TableSizes table_sizes(const RoutingConfig& config);

/// A caller-owned int32 buffer.
struct Int32Span {
  int32_t* data = nullptr;
  int64_t size = 0;
};

/// Caller-owned outputs of build_tables. Sizes must be at least: expanded T*K, cta tables
/// max_ctas, permuted max_padded (entries up to max_padded + 1 are written when present),
/// num_tokens_per_expert E_loc (optional: data == nullptr skips it).
struct RoutingTableViews {
  Int32Span expanded_idx_to_permuted_idx;
  Int32Span permuted_idx_to_token_idx;
  Int32Span cta_idx_xy_to_batch_idx;
  Int32Span cta_idx_xy_to_mn_limit;
  Int32Span num_tokens_per_expert;
  int32_t* num_non_exiting_ctas = nullptr;     ///< [1]
  int32_t* total_num_padded_tokens = nullptr;  ///< [1]
};

/// Builds every table from the global expert ids [T*K] (ids outside the local range, including
/// ids outside [0, E), are non-local). Throws InvalidArgument, before writing, when a buffer is
/// too small or a slot would not fit in int32.
void build_tables(const RoutingConfig& config, const int32_t* topk_ids,
                  const RoutingTableViews& out);

/// Owning tables (each sized exactly as table_sizes() says), for tests and the CPU backend.
struct RoutingTables {
  std::vector<int32_t> expanded_idx_to_permuted_idx;  ///< [T*K]
  std::vector<int32_t> permuted_idx_to_token_idx;     ///< [max_padded + 1]
  std::vector<int32_t> cta_idx_xy_to_batch_idx;       ///< [max_ctas]
  std::vector<int32_t> cta_idx_xy_to_mn_limit;        ///< [max_ctas]
  std::vector<int32_t> num_tokens_per_expert;         ///< [E_loc]
  int32_t num_non_exiting_ctas = 0;
  int32_t total_num_padded_tokens = 0;
};
RoutingTables build_tables(const RoutingConfig& config, const int32_t* topk_ids);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
