// Planning of the StepFun EP layer, plain C++ (no CUDA, no NCCL): who owns which expert, the
// static buffer sizes, the dispatch rule (which token goes to which peer, at which row), the fixed
// combine order and the NCCL send/recv schedules. The host mirrors at the end compute what the
// device kernels of ep_kernels.cuh compute, for the CPU tests and the simulated world.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cakemoe/stepfun_ep.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

/// Expert ownership: rank r owns the experts [offsets[r], offsets[r + 1]).
struct ExpertPartition {
  std::vector<int64_t> offsets;  ///< world_size + 1 entries, 0 first, E last, non-decreasing
  int world_size() const { return static_cast<int>(offsets.size()) - 1; }
  int64_t num_experts() const { return offsets.back(); }
  /// The rank owning `expert`, or -1 for ids outside [0, E) (such pairs go nowhere).
  int owner(int64_t expert) const;
  /// owner() of every expert, [E] (the device lookup table).
  std::vector<int32_t> owner_table() const;
};

/// The ranges the ranks declared (rank order) must tile [0, num_experts): offsets[0] = 0,
/// offsets[r + 1] = offsets[r] + counts[r] > offsets[r], last end = E. InvalidArgument naming
/// `local_expert_offset` / `local_num_experts` (with the rank) otherwise.
ExpertPartition make_partition(int64_t num_experts, const std::vector<int64_t>& local_offsets,
                               const std::vector<int64_t>& local_counts);
/// E split as evenly as possible, the first E % world ranks one expert more (tests, examples).
ExpertPartition even_partition(int64_t num_experts, int world_size);

/// Per-token payload of dispatch, in this order; a field with 0 bytes is absent.
enum Field : int { kHidden = 0, kHiddenScale, kPerTokenScale, kTopkIds, kTopkWeights, kNumFields };
const char* field_name(int field);

/// Bytes per token row of each field.
struct FieldLayout {
  std::array<int64_t, kNumFields> row_bytes{};
  bool present(int field) const { return row_bytes[field] > 0; }
  int64_t total() const;
};

/// Static sizes (see EpSizes). `tokens_per_rank` holds every rank's T.
EpSizes ep_sizes(Scheme scheme, int rank, const std::vector<int64_t>& tokens_per_rank,
                 const FieldLayout& fields, int64_t hidden);

/// Dispatch of one rank's tokens: token t goes to peer d once when any of its K experts lives on
/// d; the tokens sent to d take the rows 0, 1, ... of d's region in token order.
struct DispatchPlan {
  int world_size = 0;
  int64_t num_tokens = 0;
  int64_t rows_per_peer = 0;
  std::vector<int32_t> send_counts;        ///< [world]
  std::vector<int32_t> slot_of;            ///< [T, world]: row in peer d's region, or -1
  std::vector<int32_t> token_of_send_row;  ///< [world, rows_per_peer]: token, or -1 (unused row)
};
DispatchPlan plan_dispatch(const ExpertPartition& partition, const int32_t* topk_ids,
                           int64_t num_tokens, int64_t top_k, int64_t rows_per_peer);

/// One term of a token's combine sum: the partial that `peer` computed, found at `row` of peer's
/// region of the combine buffer.
struct CombineTerm {
  int peer = 0;
  int32_t row = 0;
};
/// The fixed summation order of token t: peers ascending (one row per peer, since a token goes to
/// a peer at most once). The sum starts from +0 in fp32 and is rounded to bf16 once.
std::vector<CombineTerm> combine_order(const DispatchPlan& plan, int64_t token);

/// One NCCL point-to-point call. `field` is a Field, kCountsBuffer (the int32 counts) or
/// kPartialBuffer (bf16 partial outputs); the offset is the same in the send and the receive
/// buffer (the region of `peer`), so the rows rank r sends to d land in d's region r.
struct P2pOp {
  bool send = true;
  int peer = 0;
  int field = 0;
  int64_t offset_bytes = 0;
  int64_t bytes = 0;
};
constexpr int kCountsBuffer = -1;
constexpr int kPartialBuffer = -2;
/// Each list is one ncclGroupStart/End: peers ascending, per peer its sends then its receives.
std::vector<P2pOp> counts_exchange_ops(int world_size);
std::vector<P2pOp> dispatch_ops(const EpSizes& sizes, const FieldLayout& fields);
std::vector<P2pOp> combine_ops(const EpSizes& sizes);

// ---- Host mirrors of the device kernels ---------------------------------------------------------

/// One field of pack_rows_host: `src` holds the own tokens' rows, `dst` the send buffer
/// [world, rows_per_peer] rows.
struct RowCopy {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  int64_t row_bytes = 0;
};
/// Copies token token_of_send_row[d][j] into row d * rows_per_peer + j for j < send_counts[d];
/// other rows are left alone.
void pack_rows_host(const DispatchPlan& plan, const std::vector<RowCopy>& fields);
/// Marks the rows beyond what each source sent as routed nowhere: recv_ids[row][k] = -1 for
/// rows j >= recv_counts[s] of every region s.
void mask_received_ids_host(int32_t* recv_ids, const int32_t* recv_counts, int world_size,
                            int64_t rows_per_peer, int64_t top_k);
/// output[t] = bf16(sum over combine_order(t) of float(partials[peer region row])), partials bf16
/// [world, rows_per_peer, H]; a token with no term gets +0.
void combine_host(const DispatchPlan& plan, const uint16_t* partials, int64_t hidden,
                  uint16_t* output);

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
