// EP planning on the CPU (src/stepfun/ep/dispatch_plan.h): expert partitions, static sizes, the
// dispatch rule, the send/recv schedules and the fixed combine order, then a simulated world of N
// ranks whose dispatch + combine must reproduce the single-rank layer's routing bookkeeping
// (which pair lands on which expert, in which order, and which partial comes back where).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "formats/codecs.h"
#include "reference/stepfun/tables.h"
#include "stepfun/ep/dispatch_plan.h"
#include "stepfun/ep_world_sim.h"
#include "testbed/expect_error.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {

TEST(EpPartition, OwnersAndRules) {
  const ExpertPartition p = make_partition(10, {0, 4, 7}, {4, 3, 3});
  EXPECT_EQ(p.world_size(), 3);
  EXPECT_EQ(p.owner(0), 0);
  EXPECT_EQ(p.owner(3), 0);
  EXPECT_EQ(p.owner(4), 1);
  EXPECT_EQ(p.owner(9), 2);
  EXPECT_EQ(p.owner(-1), -1);
  EXPECT_EQ(p.owner(10), -1);
  EXPECT_EQ(p.owner_table(), (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(even_partition(10, 3).offsets, (std::vector<int64_t>{0, 4, 7, 10}));
  EXPECT_EQ(even_partition(288, 8).offsets[1], 36);

  testbed::expect_error([] { make_partition(10, {0, 5, 7}, {4, 2, 3}); }, "local_expert_offset");
  testbed::expect_error([] { make_partition(10, {0, 3, 7}, {4, 4, 3}); }, "local_expert_offset");
  testbed::expect_error([] { make_partition(10, {0, 4, 4}, {4, 0, 6}); }, "local_num_experts");
  testbed::expect_error([] { make_partition(10, {0, 4}, {4, 5}); }, "local_num_experts");
  testbed::expect_error([] { make_partition(10, {0}, {4, 6}); }, "local_expert_offset");
  testbed::expect_error([] { even_partition(4, 5); }, "world_size");
}

FieldLayout test_fields(int64_t k) {
  FieldLayout f;
  f.row_bytes[kHidden] = 4;  // the global token number stands in for the hidden row
  f.row_bytes[kTopkIds] = 4 * k;
  f.row_bytes[kTopkWeights] = 4 * k;
  return f;
}

TEST(EpSizes, StaticBoundsAndRules) {
  FieldLayout f = test_fields(8);
  f.row_bytes[kHidden] = 4096 * 2;
  const EpSizes s = ep_sizes(Scheme::kAllToAll, 2, {5, 8, 3, 8}, f, 4096);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.num_tokens, 3);
  EXPECT_EQ(s.rows_per_peer, 8);
  EXPECT_EQ(s.layer_rows, 32);
  EXPECT_EQ(s.dispatch_row_bytes, 8192 + 32 + 32);
  EXPECT_EQ(s.combine_row_bytes, 8192);
  EXPECT_EQ(s.dispatch_wire_bytes, 3 * 8 * (8192 + 64));
  EXPECT_EQ(s.combine_wire_bytes, 3 * 8 * 8192);
  const EpSizes one = ep_sizes(Scheme::kAllGather, 0, {7}, f, 4096);
  EXPECT_EQ(one.dispatch_wire_bytes, 0);
  EXPECT_EQ(one.layer_rows, 7);

  testbed::expect_error([&] { ep_sizes(Scheme::kAllToAll, 0, {4, 0}, f, 4096); }, "hidden_states");
  testbed::expect_error([&] { ep_sizes(Scheme::kAllToAll, 2, {4, 4}, f, 4096); }, "comm");
  FieldLayout no_ids = f;
  no_ids.row_bytes[kTopkIds] = 0;
  testbed::expect_error([&] { ep_sizes(Scheme::kAllToAll, 0, {4}, no_ids, 4096); },
                        "hidden_states");
}

TEST(EpSchedule, PeersPairUpAndRegionsTileTheBuffers) {
  FieldLayout f = test_fields(2);
  f.row_bytes[kHiddenScale] = 16;
  const EpSizes s = ep_sizes(Scheme::kAllToAll, 1, {3, 5, 4}, f, 64);
  const std::vector<P2pOp> ops = dispatch_ops(s, f);
  ASSERT_EQ(ops.size(), 3u * 2u * 4u);  // peers x (send, recv) x present fields
  for (int field = 0; field < kNumFields; ++field) {
    if (!f.present(field)) continue;
    // Per field: each peer's region once as a send and once as a receive, regions tiling.
    std::vector<std::pair<int64_t, int64_t>> sends, recvs;
    for (const P2pOp& op : ops) {
      if (op.field != field) continue;
      (op.send ? sends : recvs).emplace_back(op.offset_bytes, op.bytes);
      EXPECT_EQ(op.offset_bytes, op.peer * s.rows_per_peer * f.row_bytes[field]);
    }
    for (const auto* list : {&sends, &recvs}) {
      ASSERT_EQ(list->size(), 3u);
      int64_t end = 0;
      for (const auto& region : *list) {
        EXPECT_EQ(region.first, end);
        end += region.second;
      }
      EXPECT_EQ(end, s.layer_rows * f.row_bytes[field]);
    }
  }
  const std::vector<P2pOp> counts = counts_exchange_ops(3);
  ASSERT_EQ(counts.size(), 6u);
  EXPECT_EQ(counts[2].peer, 1);
  EXPECT_EQ(counts[2].offset_bytes, 4);
  const std::vector<P2pOp> back = combine_ops(s);
  ASSERT_EQ(back.size(), 6u);
  EXPECT_EQ(back[5].offset_bytes, 2 * 5 * 128);
  EXPECT_EQ(back[5].bytes, 5 * 128);
}

/// K distinct ids in [0, E) per token.
std::vector<int32_t> random_ids(int64_t tokens, int64_t k, int64_t e, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  std::vector<int32_t> all(static_cast<size_t>(e));
  for (int32_t i = 0; i < e; ++i) all[i] = i;
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return ids;
}

TEST(EpDispatch, RuleMatchesBruteForce) {
  const ExpertPartition p = even_partition(16, 4);
  std::vector<int32_t> ids = random_ids(37, 3, 16, 7);
  ids[5] = -1;                       // dropped ids go nowhere
  ids[9] = 16;                       // so do ids past E
  ids[30] = ids[31] = ids[32] = -1;  // token 10 goes nowhere at all
  const DispatchPlan plan = plan_dispatch(p, ids.data(), 37, 3, 40);
  for (int d = 0; d < 4; ++d) {
    int32_t expected_row = 0;
    for (int64_t t = 0; t < 37; ++t) {
      bool to_d = false;
      for (int k = 0; k < 3; ++k) to_d = to_d || p.owner(ids[t * 3 + k]) == d;
      const int32_t row = plan.slot_of[t * 4 + d];
      if (!to_d) {
        EXPECT_EQ(row, -1);
        continue;
      }
      EXPECT_EQ(row, expected_row++) << "token order within the region";
      EXPECT_EQ(plan.token_of_send_row[d * 40 + row], t);
    }
    EXPECT_EQ(plan.send_counts[d], expected_row);
    for (int64_t j = expected_row; j < 40; ++j) EXPECT_EQ(plan.token_of_send_row[d * 40 + j], -1);
  }
  EXPECT_TRUE(combine_order(plan, 10).empty());
  for (int64_t t = 0; t < 37; ++t) {
    const std::vector<CombineTerm> terms = combine_order(plan, t);
    for (size_t i = 1; i < terms.size(); ++i) EXPECT_LT(terms[i - 1].peer, terms[i].peer);
  }
  testbed::expect_error([&] { plan_dispatch(p, ids.data(), 37, 3, 36); }, "num_tokens");
}

TEST(EpCombine, SumsPeersInAscendingOrderAndRoundsOnce) {
  // Token 0 goes to peers 0, 1, 2 with partials 2^30, -2^30, 1: ascending order gives
  // (2^30 - 2^30) + 1 = 1 in fp32; descending would give (1 - 2^30) + 2^30 = 0.
  const ExpertPartition p = even_partition(3, 3);
  const std::vector<int32_t> ids = {0, 1, 2, 1, -1, -1};
  const DispatchPlan plan = plan_dispatch(p, ids.data(), 2, 3, 2);
  std::vector<uint16_t> partials(3 * 2 * 1, formats::bf16_from_float(99.f));
  partials[0 * 2 + 0] = formats::bf16_from_float(1073741824.f);
  partials[1 * 2 + 0] = formats::bf16_from_float(-1073741824.f);
  partials[2 * 2 + 0] = formats::bf16_from_float(1.f);
  partials[1 * 2 + 1] = formats::bf16_from_float(0.75f);  // token 1: peer 1, row 1
  std::vector<uint16_t> out(2);
  combine_host(plan, partials.data(), 1, out.data());
  EXPECT_EQ(formats::bf16_to_float(out[0]), 1.f);
  EXPECT_EQ(formats::bf16_to_float(out[1]), 0.75f);
}

// ---- A simulated world
// ---------------------------------------------------------------------------

struct World {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  ExpertPartition partition;
  std::vector<int64_t> tokens;  // T per rank
  std::vector<int32_t> ids;     // [sum T, K] global token order (rank 0's tokens first)
};

using Pair = std::pair<int64_t, int64_t>;  // (global token, k)

/// Dispatch, the receivers' routing tables, combine; checks every step against the single-rank
/// bookkeeping of the same global tokens.
void check_world(const World& w) {
  const int world = w.partition.world_size();
  const int64_t k = w.top_k, e = w.num_experts;
  std::vector<int64_t> start(world + 1, 0);
  for (int r = 0; r < world; ++r) start[r + 1] = start[r] + w.tokens[r];
  const FieldLayout fields = test_fields(k);
  const int64_t hidden = 2;  // one int32 "partial" per row: combine_row_bytes = 4

  // Dispatch: pack the own rows (global token, ids, pair tags) and run the two exchanges.
  std::vector<EpSizes> sizes;
  std::vector<DispatchPlan> plans;
  std::vector<std::vector<int32_t>> send[kNumFields], recv[kNumFields];
  std::vector<std::vector<int32_t>> counts_in(world, std::vector<int32_t>(world, -9));
  std::vector<sim::RankBuffers> bufs(world);
  for (int r = 0; r < world; ++r) {
    sizes.push_back(ep_sizes(Scheme::kAllToAll, r, w.tokens, fields, hidden));
    const int64_t rows = sizes[r].rows_per_peer, t_r = w.tokens[r], layer = sizes[r].layer_rows;
    std::vector<int32_t> own[kNumFields];
    for (int64_t t = 0; t < t_r; ++t) {
      const int64_t g = start[r] + t;
      own[kHidden].push_back(static_cast<int32_t>(g));
      for (int64_t j = 0; j < k; ++j) {
        own[kTopkIds].push_back(w.ids[g * k + j]);
        own[kTopkWeights].push_back(static_cast<int32_t>(g * k + j));
      }
    }
    plans.push_back(plan_dispatch(w.partition, own[kTopkIds].data(), t_r, k, rows));
    std::vector<RowCopy> copies;
    for (int f : {kHidden, kTopkIds, kTopkWeights}) {
      const int64_t words = fields.row_bytes[f] / 4;
      // NOTE: received ids start as expert 0 (a stale but valid id): only the mask keeps rows
      // that no source filled away from the experts.
      send[f].push_back(std::vector<int32_t>(layer * words, 0x5A5A5A5A));
      recv[f].push_back(std::vector<int32_t>(layer * words, f == kTopkIds ? 0 : 0x5A5A5A5A));
      copies.push_back(RowCopy{reinterpret_cast<const uint8_t*>(own[f].data()),
                               reinterpret_cast<uint8_t*>(send[f][r].data()), fields.row_bytes[f]});
    }
    pack_rows_host(plans[r], copies);
    for (int f : {kHidden, kTopkIds, kTopkWeights}) {
      bufs[r].send[f] = reinterpret_cast<uint8_t*>(send[f][r].data());
      bufs[r].recv[f] = reinterpret_cast<uint8_t*>(recv[f][r].data());
      bufs[r].send_bytes[f] = bufs[r].recv_bytes[f] = layer * fields.row_bytes[f];
    }
    bufs[r].send[kCountsBuffer] = reinterpret_cast<uint8_t*>(plans[r].send_counts.data());
    bufs[r].recv[kCountsBuffer] = reinterpret_cast<uint8_t*>(counts_in[r].data());
    bufs[r].send_bytes[kCountsBuffer] = bufs[r].recv_bytes[kCountsBuffer] = 4 * world;
  }
  std::vector<std::vector<P2pOp>> counts_ops, payload_ops, back_ops;
  for (int r = 0; r < world; ++r) {
    counts_ops.push_back(counts_exchange_ops(world));
    payload_ops.push_back(dispatch_ops(sizes[r], fields));
    back_ops.push_back(combine_ops(sizes[r]));
  }
  sim::run_groups(counts_ops, bufs);
  sim::run_groups(payload_ops, bufs);
  if (::testing::Test::HasFatalFailure()) return;
  for (int p = 0; p < world; ++p) {
    for (int s = 0; s < world; ++s) EXPECT_EQ(counts_in[p][s], plans[s].send_counts[p]);
    mask_received_ids_host(recv[kTopkIds][p].data(), counts_in[p].data(), world,
                           sizes[p].rows_per_peer, k);
  }

  // Receivers: the local layer's routing tables over the received rows.
  std::map<Pair, int> handled;
  std::map<int64_t, std::vector<std::pair<int32_t, Pair>>> ep_segments;  // expert -> (slot, pair)
  std::vector<std::vector<int32_t>> partials(world);
  for (int p = 0; p < world; ++p) {
    const int64_t rows = sizes[p].rows_per_peer, layer = sizes[p].layer_rows;
    reference::stepfun::RoutingConfig cfg;
    cfg.num_tokens = layer;
    cfg.top_k = k;
    cfg.num_experts = e;
    cfg.local_expert_offset = w.partition.offsets[p];
    cfg.local_num_experts = w.partition.offsets[p + 1] - w.partition.offsets[p];
    const auto tables = reference::stepfun::build_tables(cfg, recv[kTopkIds][p].data());
    partials[p].assign(layer, -7);  // rows no source filled keep the sentinel
    for (int64_t row = 0; row < layer; ++row) {
      const int s = static_cast<int>(row / rows);
      const bool filled = row % rows < counts_in[p][s];
      const int32_t g = recv[kHidden][p][row];
      bool local = false;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t slot = tables.expanded_idx_to_permuted_idx[row * k + j];
        if (slot < 0) continue;
        ASSERT_TRUE(filled) << "an unsent row reached an expert";
        ASSERT_GE(g, start[s]);
        ASSERT_LT(g, start[s + 1]) << "row of region " << s << " holds another rank's token";
        EXPECT_EQ(recv[kTopkIds][p][row * k + j], w.ids[g * k + j]);
        EXPECT_EQ(recv[kTopkWeights][p][row * k + j], g * k + j);
        ++handled[Pair(g, j)];
        ep_segments[recv[kTopkIds][p][row * k + j]].emplace_back(slot, Pair(g, j));
        local = true;
      }
      EXPECT_EQ(local, filled) << "a row is sent to a peer iff one of its experts lives there";
      if (filled) partials[p][row] = g * world + p;
    }
  }

  // Single rank: every valid pair exactly once, and each expert's rows in the same order.
  reference::stepfun::RoutingConfig all;
  all.num_tokens = start[world];
  all.top_k = k;
  all.num_experts = e;
  all.local_num_experts = e;
  const auto single = reference::stepfun::build_tables(all, w.ids.data());
  std::map<int64_t, std::vector<std::pair<int32_t, Pair>>> single_segments;
  for (int64_t g = 0; g < start[world]; ++g) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t slot = single.expanded_idx_to_permuted_idx[g * k + j];
      EXPECT_EQ(handled[Pair(g, j)], slot >= 0 ? 1 : 0) << "token " << g << " k " << j;
      if (slot >= 0) single_segments[w.ids[g * k + j]].emplace_back(slot, Pair(g, j));
    }
  }
  ASSERT_EQ(ep_segments.size(), single_segments.size());
  for (auto& [expert, list] : single_segments) {
    std::vector<std::pair<int32_t, Pair>>& ep_list = ep_segments[expert];
    std::sort(list.begin(), list.end());
    std::sort(ep_list.begin(), ep_list.end());
    ASSERT_EQ(ep_list.size(), list.size()) << "expert " << expert;
    for (size_t i = 0; i < list.size(); ++i) {
      EXPECT_EQ(ep_list[i].second, list[i].second) << "expert " << expert << " row " << i;
    }
  }

  // Combine: partials back; each token's terms are its experts' owners, ascending, and each
  // term's row holds that owner's partial of this very token.
  std::vector<std::vector<int32_t>> combine_recv(world);
  for (int r = 0; r < world; ++r) {
    combine_recv[r].assign(sizes[r].layer_rows, -8);
    bufs[r].send[kPartialBuffer] = reinterpret_cast<uint8_t*>(partials[r].data());
    bufs[r].recv[kPartialBuffer] = reinterpret_cast<uint8_t*>(combine_recv[r].data());
    bufs[r].send_bytes[kPartialBuffer] = bufs[r].recv_bytes[kPartialBuffer] =
        sizes[r].layer_rows * 4;
  }
  sim::run_groups(back_ops, bufs);
  if (::testing::Test::HasFatalFailure()) return;
  for (int r = 0; r < world; ++r) {
    for (int64_t t = 0; t < w.tokens[r]; ++t) {
      const int64_t g = start[r] + t;
      std::set<int> owners;
      for (int64_t j = 0; j < k; ++j) {
        const int d = w.partition.owner(w.ids[g * k + j]);
        if (d >= 0) owners.insert(d);
      }
      std::vector<int> peers;
      for (const CombineTerm& c : combine_order(plans[r], t)) {
        peers.push_back(c.peer);
        EXPECT_EQ(combine_recv[r][c.peer * sizes[r].rows_per_peer + c.row], g * world + c.peer);
      }
      EXPECT_EQ(peers, std::vector<int>(owners.begin(), owners.end())) << "token " << g;
    }
  }
}

World make_world(int64_t e, int64_t k, int world, std::vector<int64_t> tokens, uint32_t seed) {
  World w;
  w.num_experts = e;
  w.top_k = k;
  w.partition = even_partition(e, world);
  w.tokens = std::move(tokens);
  int64_t total = 0;
  for (int64_t t : w.tokens) total += t;
  w.ids = random_ids(total, k, e, seed);
  return w;
}

TEST(EpWorld, UnequalTokensAndDroppedIds) {
  World w = make_world(16, 4, 4, {5, 8, 1, 8}, 11);
  w.ids[3] = -1;
  w.ids[17] = 16;
  check_world(w);
}

TEST(EpWorld, RanksThatReceiveNothing) {
  World w = make_world(9, 2, 3, {4, 6, 5}, 12);
  for (int32_t& id : w.ids) id %= 3;  // every expert on rank 0
  for (size_t i = 0; i < w.ids.size(); i += 2) w.ids[i + 1] = (w.ids[i] + 1) % 3;  // distinct
  check_world(w);
}

TEST(EpWorld, TokensWhoseExpertsAreAllRemote) {
  World w = make_world(12, 3, 3, {7, 1, 4}, 13);
  for (int64_t i = 0; i < 7 * 3; ++i) w.ids[i] = static_cast<int32_t>(8 + i % 3);  // rank 2
  check_world(w);
}

TEST(EpWorld, SingleRankAndOneTokenPerRank) {
  check_world(make_world(8, 2, 1, {9}, 14));
  check_world(make_world(8, 8, 4, {1, 1, 1, 1}, 15));
}

TEST(EpWorld, Step35ShapeAtEp8) {
  check_world(make_world(288, 8, 8, {64, 64, 64, 64, 64, 64, 64, 64}, 16));
}

}  // namespace
}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
