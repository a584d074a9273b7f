#include "reference/stepfun/tables.h"

#include <algorithm>
#include <limits>
#include <string>

#include "cakemoe/stepfun.h"
#include "core/check.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

void check_span(const Int32Span& span, int64_t min_size, const std::string& name) {
  core::require(span.data != nullptr || min_size == 0, name, "buffer is required");
  core::require(span.size >= min_size, name,
                "needs >= " + std::to_string(min_size) + " int32 entries, got " +
                    std::to_string(span.size));
}

}  // namespace

TableSizes table_sizes(const RoutingConfig& config) {
  check_routing_config(config);
  TableSizes s;
  s.expanded = config.num_tokens * config.top_k;
  // NOTE: spec §2.5 DECISION: bounds use the global E (monotonic in E, never too small).
  s.max_ctas =
      cakemoe::stepfun::max_ctas(config.num_tokens, config.top_k, config.num_experts, config.tile);
  s.max_padded = s.max_ctas * config.tile;
  core::require(s.max_padded < std::numeric_limits<int32_t>::max(), "num_tokens",
                "max_padded + 1 = " + std::to_string(s.max_padded + 1) + " must fit in int32");
  return s;
}

void build_tables(const RoutingConfig& config, const int32_t* topk_ids,
                  const RoutingTableViews& out) {
  const TableSizes sizes = table_sizes(config);
  const int64_t num_local = config.local_num_experts;
  const int64_t tile = config.tile;

  // Validate every destination before writing anything.
  check_span(out.expanded_idx_to_permuted_idx, sizes.expanded, "expanded_idx_to_permuted_idx");
  check_span(out.permuted_idx_to_token_idx, sizes.max_padded, "permuted_idx_to_token_idx");
  check_span(out.cta_idx_xy_to_batch_idx, sizes.max_ctas, "cta_idx_xy_to_batch_idx");
  check_span(out.cta_idx_xy_to_mn_limit, sizes.max_ctas, "cta_idx_xy_to_mn_limit");
  if (out.num_tokens_per_expert.data != nullptr) {
    check_span(out.num_tokens_per_expert, num_local, "num_tokens_per_expert");
  }
  core::require(out.num_non_exiting_ctas != nullptr, "num_non_exiting_ctas", "is required");
  core::require(out.total_num_padded_tokens != nullptr, "total_num_padded_tokens", "is required");
  core::require(topk_ids != nullptr || sizes.expanded == 0, "topk_ids", "is required");

  // Local expert of every expanded index (-1: non-local, spec §2.3) and the counts cnt[e].
  std::vector<int32_t> local(static_cast<size_t>(sizes.expanded));
  std::vector<int64_t> count(static_cast<size_t>(num_local), 0);
  for (int64_t i = 0; i < sizes.expanded; ++i) {
    const int64_t e = static_cast<int64_t>(topk_ids[i]) - config.local_expert_offset;
    local[i] = (e >= 0 && e < num_local) ? static_cast<int32_t>(e) : -1;
    if (local[i] >= 0) ++count[e];
  }

  // CTA counts and offsets (spec §2.4), experts in index order.
  std::vector<int64_t> cta_offset(static_cast<size_t>(num_local));
  int64_t num_ctas = 0;
  for (int64_t e = 0; e < num_local; ++e) {
    cta_offset[e] = num_ctas;
    num_ctas += (count[e] + tile - 1) / tile;
  }
  const int64_t total_padded = num_ctas * tile;

  // Slots: segment start + rank, ranks in increasing (t, k) order (spec §2.4 DECISION).
  int32_t* e2p = out.expanded_idx_to_permuted_idx.data;
  int32_t* p2t = out.permuted_idx_to_token_idx.data;
  std::fill(p2t, p2t + total_padded, -1);  // padded slots of every segment stay -1
  std::vector<int64_t> next_rank(static_cast<size_t>(num_local), 0);
  for (int64_t i = 0; i < sizes.expanded; ++i) {
    const int32_t e = local[i];
    if (e < 0) {
      e2p[i] = -1;
      continue;
    }
    const int64_t slot = cta_offset[e] * tile + next_rank[e]++;
    e2p[i] = static_cast<int32_t>(slot);
    p2t[slot] = static_cast<int32_t>(i / config.top_k);
  }

  // CTA tables: local expert and exclusive end row of valid data per tile.
  int32_t* batch = out.cta_idx_xy_to_batch_idx.data;
  int32_t* mn_limit = out.cta_idx_xy_to_mn_limit.data;
  for (int64_t e = 0; e < num_local; ++e) {
    const int64_t first = cta_offset[e];
    const int64_t end = first + (count[e] + tile - 1) / tile;
    for (int64_t c = first; c < end; ++c) {
      batch[c] = static_cast<int32_t>(e);
      mn_limit[c] = static_cast<int32_t>(std::min((c + 1) * tile, first * tile + count[e]));
    }
  }

  // Routing tail (spec §2.4 DECISION): benign (batch 0, zero valid rows, -1 slots) or poison.
  const bool poison = config.poison_tail;
  for (int64_t c = num_ctas; c < sizes.max_ctas; ++c) {
    batch[c] = poison ? kTailPoison : 0;
    mn_limit[c] = poison ? kTailPoison : static_cast<int32_t>(c * tile);
  }
  const int64_t p2t_end = std::min(out.permuted_idx_to_token_idx.size, sizes.max_padded + 1);
  std::fill(p2t + total_padded, p2t + p2t_end, poison ? kTailPoison : -1);

  if (out.num_tokens_per_expert.data != nullptr) {
    for (int64_t e = 0; e < num_local; ++e) {
      out.num_tokens_per_expert.data[e] = static_cast<int32_t>(count[e]);
    }
  }
  *out.num_non_exiting_ctas = static_cast<int32_t>(num_ctas);
  *out.total_num_padded_tokens = static_cast<int32_t>(total_padded);
}

RoutingTables build_tables(const RoutingConfig& config, const int32_t* topk_ids) {
  const TableSizes sizes = table_sizes(config);
  RoutingTables t;
  t.expanded_idx_to_permuted_idx.resize(static_cast<size_t>(sizes.expanded));
  t.permuted_idx_to_token_idx.resize(static_cast<size_t>(sizes.max_padded + 1));
  t.cta_idx_xy_to_batch_idx.resize(static_cast<size_t>(sizes.max_ctas));
  t.cta_idx_xy_to_mn_limit.resize(static_cast<size_t>(sizes.max_ctas));
  t.num_tokens_per_expert.resize(static_cast<size_t>(config.local_num_experts));
  RoutingTableViews v;
  v.expanded_idx_to_permuted_idx = {t.expanded_idx_to_permuted_idx.data(), sizes.expanded};
  v.permuted_idx_to_token_idx = {t.permuted_idx_to_token_idx.data(), sizes.max_padded + 1};
  v.cta_idx_xy_to_batch_idx = {t.cta_idx_xy_to_batch_idx.data(), sizes.max_ctas};
  v.cta_idx_xy_to_mn_limit = {t.cta_idx_xy_to_mn_limit.data(), sizes.max_ctas};
  v.num_tokens_per_expert = {t.num_tokens_per_expert.data(), config.local_num_experts};
  v.num_non_exiting_ctas = &t.num_non_exiting_ctas;
  v.total_num_padded_tokens = &t.total_num_padded_tokens;
  build_tables(config, topk_ids, v);
  return t;
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
