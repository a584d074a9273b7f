// Planning of the StepFun EP layer (see dispatch_plan.h): plain C++, run by the CPU tests.
#include "stepfun/ep/dispatch_plan.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "formats/codecs.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

using core::require;

int ExpertPartition::owner(int64_t expert) const {
  if (expert < 0 || expert >= num_experts()) return -1;
  // The last rank whose range starts at or before `expert` and is non-empty holds it.
  const auto it = std::upper_bound(offsets.begin(), offsets.end(), expert);
  return static_cast<int>(it - offsets.begin()) - 1;
}

std::vector<int32_t> ExpertPartition::owner_table() const {
  std::vector<int32_t> table(static_cast<size_t>(num_experts()));
  for (int r = 0; r < world_size(); ++r) {
    for (int64_t e = offsets[r]; e < offsets[r + 1]; ++e) table[e] = r;
  }
  return table;
}

ExpertPartition make_partition(int64_t num_experts, const std::vector<int64_t>& local_offsets,
                               const std::vector<int64_t>& local_counts) {
  require(num_experts > 0, "num_experts", "must be > 0, got " + std::to_string(num_experts));
  require(!local_offsets.empty() && local_offsets.size() == local_counts.size(),
          "local_expert_offset", "needs one range per rank");
  ExpertPartition p;
  p.offsets.push_back(0);
  for (size_t r = 0; r < local_offsets.size(); ++r) {
    const std::string rank = " (rank " + std::to_string(r) + ")";
    require(local_offsets[r] == p.offsets.back(), "local_expert_offset",
            "the ranks' expert ranges must tile [0, num_experts) in rank order: expected " +
                std::to_string(p.offsets.back()) + ", got " + std::to_string(local_offsets[r]) +
                rank);
    require(local_counts[r] > 0, "local_num_experts",
            "must be > 0, got " + std::to_string(local_counts[r]) + rank);
    p.offsets.push_back(local_offsets[r] + local_counts[r]);
  }
  require(p.offsets.back() == num_experts, "local_num_experts",
          "the ranks' expert ranges end at " + std::to_string(p.offsets.back()) +
              ", not at num_experts = " + std::to_string(num_experts));
  return p;
}

ExpertPartition even_partition(int64_t num_experts, int world_size) {
  require(world_size > 0 && world_size <= num_experts, "world_size",
          "must be in [1, num_experts], got " + std::to_string(world_size));
  ExpertPartition p;
  p.offsets.push_back(0);
  for (int r = 0; r < world_size; ++r) {
    p.offsets.push_back(p.offsets.back() + num_experts / world_size +
                        (r < num_experts % world_size ? 1 : 0));
  }
  return p;
}

const char* field_name(int field) {
  switch (field) {
    case kHidden:
      return "hidden_states";
    case kHiddenScale:
      return "hidden_states_scale";
    case kPerTokenScale:
      return "per_token_scale";
    case kTopkIds:
      return "topk_ids";
    case kTopkWeights:
      return "topk_weights";
    case kCountsBuffer:
      return "counts";
    case kPartialBuffer:
      return "partial_output";
    default:
      return "?";
  }
}

int64_t FieldLayout::total() const {
  int64_t sum = 0;
  for (int64_t b : row_bytes) sum += b;
  return sum;
}

EpSizes ep_sizes(Scheme scheme, int rank, const std::vector<int64_t>& tokens_per_rank,
                 const FieldLayout& fields, int64_t hidden) {
  const int world = static_cast<int>(tokens_per_rank.size());
  require(world > 0, "comm", "needs at least one rank");
  require(rank >= 0 && rank < world, "comm", "rank " + std::to_string(rank) + " outside the world");
  require(hidden > 0, "hidden_states", "needs H > 0");
  for (int r = 0; r < world; ++r) {
    require(tokens_per_rank[r] > 0, "hidden_states",
            "every rank needs T > 0 tokens; rank " + std::to_string(r) + " has " +
                std::to_string(tokens_per_rank[r]));
  }
  for (int f = 0; f < kNumFields; ++f) {
    require(fields.row_bytes[f] >= 0, field_name(f), "has negative row bytes");
  }
  require(fields.present(kHidden) && fields.present(kTopkIds) && fields.present(kTopkWeights),
          "hidden_states", "dispatch needs hidden states, top-k ids and weights");
  EpSizes s;
  s.world_size = world;
  s.rank = rank;
  s.num_tokens = tokens_per_rank[rank];
  s.rows_per_peer = *std::max_element(tokens_per_rank.begin(), tokens_per_rank.end());
  require(s.rows_per_peer <= std::numeric_limits<int32_t>::max() / world, "hidden_states",
          "world_size * max T must fit in int32");
  s.layer_rows = world * s.rows_per_peer;
  s.dispatch_row_bytes = fields.total();
  s.combine_row_bytes = 2 * hidden;
  // NOTE: both schemes move (world - 1) chunks of rows_per_peer rows per rank: all-to-all sends
  // one region to each other peer; NCCL's ring all-gather / reduce-scatter forward world - 1
  // chunks. Other NCCL algorithms move the same payload in other patterns.
  (void)scheme;
  s.dispatch_wire_bytes = (world - 1) * s.rows_per_peer * s.dispatch_row_bytes;
  s.combine_wire_bytes = (world - 1) * s.rows_per_peer * s.combine_row_bytes;
  return s;
}

DispatchPlan plan_dispatch(const ExpertPartition& partition, const int32_t* topk_ids,
                           int64_t num_tokens, int64_t top_k, int64_t rows_per_peer) {
  require(num_tokens >= 0 && num_tokens <= rows_per_peer, "num_tokens",
          "must be in [0, rows_per_peer = " + std::to_string(rows_per_peer) + "]");
  require(top_k > 0, "top_k", "must be > 0");
  const int world = partition.world_size();
  DispatchPlan plan;
  plan.world_size = world;
  plan.num_tokens = num_tokens;
  plan.rows_per_peer = rows_per_peer;
  plan.send_counts.assign(world, 0);
  plan.slot_of.assign(static_cast<size_t>(num_tokens * world), -1);
  plan.token_of_send_row.assign(static_cast<size_t>(world * rows_per_peer), -1);
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<char> to_peer(world, 0);
    for (int64_t k = 0; k < top_k; ++k) {
      const int d = partition.owner(topk_ids[t * top_k + k]);
      if (d >= 0) to_peer[d] = 1;
    }
    for (int d = 0; d < world; ++d) {
      if (!to_peer[d]) continue;
      const int32_t row = plan.send_counts[d]++;
      plan.slot_of[t * world + d] = row;
      plan.token_of_send_row[d * rows_per_peer + row] = static_cast<int32_t>(t);
    }
  }
  return plan;
}

std::vector<CombineTerm> combine_order(const DispatchPlan& plan, int64_t token) {
  require(token >= 0 && token < plan.num_tokens, "token", "outside the plan's tokens");
  std::vector<CombineTerm> terms;
  for (int d = 0; d < plan.world_size; ++d) {
    const int32_t row = plan.slot_of[token * plan.world_size + d];
    if (row >= 0) terms.push_back(CombineTerm{d, row});
  }
  return terms;
}

std::vector<P2pOp> counts_exchange_ops(int world_size) {
  std::vector<P2pOp> ops;
  for (int p = 0; p < world_size; ++p) {
    ops.push_back(P2pOp{true, p, kCountsBuffer, p * int64_t{4}, 4});
    ops.push_back(P2pOp{false, p, kCountsBuffer, p * int64_t{4}, 4});
  }
  return ops;
}

std::vector<P2pOp> dispatch_ops(const EpSizes& sizes, const FieldLayout& fields) {
  std::vector<P2pOp> ops;
  for (int p = 0; p < sizes.world_size; ++p) {
    for (const bool send : {true, false}) {
      for (int f = 0; f < kNumFields; ++f) {
        if (!fields.present(f)) continue;
        const int64_t bytes = sizes.rows_per_peer * fields.row_bytes[f];
        ops.push_back(P2pOp{send, p, f, p * bytes, bytes});
      }
    }
  }
  return ops;
}

std::vector<P2pOp> combine_ops(const EpSizes& sizes) {
  std::vector<P2pOp> ops;
  const int64_t bytes = sizes.rows_per_peer * sizes.combine_row_bytes;
  for (int p = 0; p < sizes.world_size; ++p) {
    ops.push_back(P2pOp{true, p, kPartialBuffer, p * bytes, bytes});
    ops.push_back(P2pOp{false, p, kPartialBuffer, p * bytes, bytes});
  }
  return ops;
}

void pack_rows_host(const DispatchPlan& plan, const std::vector<RowCopy>& fields) {
  for (int d = 0; d < plan.world_size; ++d) {
    for (int64_t j = 0; j < plan.send_counts[d]; ++j) {
      const int64_t row = d * plan.rows_per_peer + j;
      const int64_t t = plan.token_of_send_row[row];
      for (const RowCopy& f : fields) {
        std::memcpy(f.dst + row * f.row_bytes, f.src + t * f.row_bytes,
                    static_cast<size_t>(f.row_bytes));
      }
    }
  }
}

void mask_received_ids_host(int32_t* recv_ids, const int32_t* recv_counts, int world_size,
                            int64_t rows_per_peer, int64_t top_k) {
  for (int s = 0; s < world_size; ++s) {
    for (int64_t j = recv_counts[s]; j < rows_per_peer; ++j) {
      std::fill_n(recv_ids + (s * rows_per_peer + j) * top_k, top_k, -1);
    }
  }
}

void combine_host(const DispatchPlan& plan, const uint16_t* partials, int64_t hidden,
                  uint16_t* output) {
  for (int64_t t = 0; t < plan.num_tokens; ++t) {
    const std::vector<CombineTerm> terms = combine_order(plan, t);
    for (int64_t h = 0; h < hidden; ++h) {
      float acc = 0.f;
      for (const CombineTerm& c : terms) {
        const int64_t row = c.peer * plan.rows_per_peer + c.row;
        acc += formats::bf16_to_float(partials[row * hidden + h]);
      }
      output[t * hidden + h] = formats::bf16_from_float(acc);
    }
  }
}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
