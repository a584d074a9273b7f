// Tests of the StepFun permutation tables (spec stepfun §2.3-§2.5): a brute-force re-derivation
// (sort pairs by expert, count valid rows per tile) plus invariants, tails and buffer checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "reference/stepfun/tables.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

constexpr int32_t kUnwritten = 0x5A5A5A5A;  // testbed::poison value of int32 buffers

RoutingConfig make_config(int64_t T, int64_t K, int64_t E, int64_t off, int64_t E_loc,
                          int64_t tile) {
  RoutingConfig c;
  c.num_tokens = T;
  c.top_k = K;
  c.num_experts = E;
  c.local_expert_offset = off;
  c.local_num_experts = E_loc;
  c.tile = tile;
  return c;
}

/// K distinct random experts per token.
std::vector<int32_t> random_ids(testbed::Rng& rng, int64_t T, int64_t K, int64_t E) {
  std::vector<int32_t> ids;
  std::vector<int32_t> all(static_cast<size_t>(E));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(all.begin(), all.end(), rng.engine());
    ids.insert(ids.end(), all.begin(), all.begin() + K);
  }
  return ids;
}

/// Independent derivation: stable-sort (expert, t, k) triples, lay segments out one after the
/// other (each rounded up to whole tiles), then read the CTA tables off the padded row buffer.
RoutingTables brute_force(const RoutingConfig& c, const std::vector<int32_t>& ids) {
  const int64_t T = c.num_tokens, K = c.top_k, tile = c.tile;
  const int64_t max_ctas = cakemoe::stepfun::max_ctas(T, K, c.num_experts, tile);
  std::vector<std::tuple<int64_t, int64_t, int64_t>> pairs;  // (local expert, t, k)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = ids[t * K + k] - c.local_expert_offset;
      if (e >= 0 && e < c.local_num_experts) pairs.emplace_back(e, t, k);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  RoutingTables r;
  r.expanded_idx_to_permuted_idx.assign(static_cast<size_t>(T * K), -1);
  r.num_tokens_per_expert.assign(static_cast<size_t>(c.local_num_experts), 0);
  std::vector<int32_t> rows;          // padded permuted rows: token or -1
  std::vector<int32_t> row_expert;    // owning expert of each padded row
  size_t i = 0;
  for (int64_t e = 0; e < c.local_num_experts; ++e) {
    for (; i < pairs.size() && std::get<0>(pairs[i]) == e; ++i) {
      r.expanded_idx_to_permuted_idx[std::get<1>(pairs[i]) * K + std::get<2>(pairs[i])] =
          static_cast<int32_t>(rows.size());
      rows.push_back(static_cast<int32_t>(std::get<1>(pairs[i])));
      row_expert.push_back(static_cast<int32_t>(e));
      ++r.num_tokens_per_expert[e];
    }
    while (rows.size() % tile != 0) {
      rows.push_back(-1);
      row_expert.push_back(static_cast<int32_t>(e));
    }
  }
  r.total_num_padded_tokens = static_cast<int32_t>(rows.size());
  r.num_non_exiting_ctas = static_cast<int32_t>(rows.size() / tile);
  for (int64_t cta = 0; cta < max_ctas; ++cta) {
    if (cta < r.num_non_exiting_ctas) {
      int32_t valid = 0;
      for (int64_t row = cta * tile; row < (cta + 1) * tile; ++row) valid += rows[row] >= 0;
      r.cta_idx_xy_to_batch_idx.push_back(row_expert[cta * tile]);
      r.cta_idx_xy_to_mn_limit.push_back(static_cast<int32_t>(cta * tile + valid));
    } else {  // benign tail
      r.cta_idx_xy_to_batch_idx.push_back(0);
      r.cta_idx_xy_to_mn_limit.push_back(static_cast<int32_t>(cta * tile));
    }
  }
  rows.resize(static_cast<size_t>(max_ctas * tile + 1), -1);
  r.permuted_idx_to_token_idx = rows;
  return r;
}

void expect_tables_equal(const RoutingTables& got, const RoutingTables& want) {
  EXPECT_EQ(got.expanded_idx_to_permuted_idx, want.expanded_idx_to_permuted_idx);
  EXPECT_EQ(got.permuted_idx_to_token_idx, want.permuted_idx_to_token_idx);
  EXPECT_EQ(got.cta_idx_xy_to_batch_idx, want.cta_idx_xy_to_batch_idx);
  EXPECT_EQ(got.cta_idx_xy_to_mn_limit, want.cta_idx_xy_to_mn_limit);
  EXPECT_EQ(got.num_tokens_per_expert, want.num_tokens_per_expert);
  EXPECT_EQ(got.num_non_exiting_ctas, want.num_non_exiting_ctas);
  EXPECT_EQ(got.total_num_padded_tokens, want.total_num_padded_tokens);
}

/// Invariants of spec §2.4 stated directly on the output.
void check_invariants(const RoutingConfig& c, const std::vector<int32_t>& ids,
                      const RoutingTables& r) {
  const int64_t K = c.top_k, tile = c.tile;
  ASSERT_EQ(r.total_num_padded_tokens, r.num_non_exiting_ctas * tile);
  ASSERT_LE(r.num_non_exiting_ctas,
            cakemoe::stepfun::max_ctas(c.num_tokens, K, c.local_num_experts, tile));
  // Segment start of each expert = first padded row whose tile has that batch index.
  std::vector<int64_t> seg_start(static_cast<size_t>(c.local_num_experts), -1);
  for (int64_t cta = r.num_non_exiting_ctas - 1; cta >= 0; --cta) {
    seg_start[r.cta_idx_xy_to_batch_idx[cta]] = cta * tile;
  }
  std::vector<bool> used(static_cast<size_t>(r.total_num_padded_tokens), false);
  std::vector<int64_t> last_slot(static_cast<size_t>(c.local_num_experts), -1);
  for (int64_t i = 0; i < c.num_tokens * K; ++i) {
    const int64_t e = ids[i] - c.local_expert_offset;
    const int32_t slot = r.expanded_idx_to_permuted_idx[i];
    if (e < 0 || e >= c.local_num_experts) {
      ASSERT_EQ(slot, -1) << i;
      continue;
    }
    ASSERT_GE(slot, seg_start[e]) << i;
    ASSERT_LT(slot, seg_start[e] + r.num_tokens_per_expert[e]) << i;
    ASSERT_FALSE(used[slot]) << "slot " << slot << " used twice";
    used[slot] = true;
    ASSERT_EQ(r.permuted_idx_to_token_idx[slot], i / K);
    // Ranks increase with the expanded index t*K+k (spec §2.4 DECISION: token order).
    ASSERT_GT(slot, last_slot[e]) << i;
    last_slot[e] = slot;
  }
  for (int64_t s = 0; s < r.total_num_padded_tokens; ++s) {
    if (!used[s]) {
      ASSERT_EQ(r.permuted_idx_to_token_idx[s], -1) << s;
    }
  }
}

TEST(StepfunRoutingTables, MatchBruteForceOnRandomShapes) {
  testbed::Rng rng(31337);
  const int64_t tiles[] = {8, 16, 32, 64, 128, 256};
  const int64_t experts[] = {8, 64, 288, 512};
  for (int iter = 0; iter < 120; ++iter) {
    const int64_t E = experts[iter % 4];
    const int64_t tile = tiles[(iter / 4) % 6];
    const int64_t T = iter % 7 == 0 ? 1 : rng.integer(1, 300);
    const int64_t K = rng.integer(1, std::min<int64_t>(E, 10) + 1);
    const int64_t E_loc = rng.integer(1, E + 1);
    const int64_t off = rng.integer(0, E - E_loc + 1);
    RoutingConfig c = make_config(T, K, E, off, E_loc, tile);
    const std::vector<int32_t> ids = random_ids(rng, T, K, E);
    const RoutingTables got = build_tables(c, ids.data());
    SCOPED_TRACE(testing::Message() << "T=" << T << " K=" << K << " E=" << E << " off=" << off
                                    << " E_loc=" << E_loc << " tile=" << tile);
    expect_tables_equal(got, brute_force(c, ids));
    check_invariants(c, ids, got);
    const int64_t max_ctas = cakemoe::stepfun::max_ctas(T, K, E, tile);
    EXPECT_EQ(got.cta_idx_xy_to_batch_idx.size(), static_cast<size_t>(max_ctas));
    EXPECT_EQ(got.permuted_idx_to_token_idx.size(), static_cast<size_t>(max_ctas * tile + 1));
  }
}

TEST(StepfunRoutingTables, LocalRangeAtStartMiddleEnd) {
  testbed::Rng rng(11);
  const int64_t E = 288, T = 64, K = 8;
  const std::vector<int32_t> ids = random_ids(rng, T, K, E);
  for (int64_t off : {int64_t(0), int64_t(144), E - 36}) {
    RoutingConfig c = make_config(T, K, E, off, 36, 16);
    const RoutingTables got = build_tables(c, ids.data());
    expect_tables_equal(got, brute_force(c, ids));
    check_invariants(c, ids, got);
    // Batch indices are local: they never reach E_loc.
    for (int32_t cta = 0; cta < got.num_non_exiting_ctas; ++cta) {
      EXPECT_LT(got.cta_idx_xy_to_batch_idx[cta], 36);
    }
  }
}

TEST(StepfunRoutingTables, EveryTokenOnOneExpert) {
  const int64_t T = 100;
  std::vector<int32_t> ids(T, 5);
  RoutingConfig c = make_config(T, 1, 8, 0, 8, 16);
  const RoutingTables r = build_tables(c, ids.data());
  // 100 pairs -> ceil(100/16) = 7 CTAs of expert 5, slots 0..99 in token order.
  EXPECT_EQ(r.num_non_exiting_ctas, 7);
  EXPECT_EQ(r.total_num_padded_tokens, 112);
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(r.expanded_idx_to_permuted_idx[t], t);
  for (int c2 = 0; c2 < 7; ++c2) {
    EXPECT_EQ(r.cta_idx_xy_to_batch_idx[c2], 5);
    EXPECT_EQ(r.cta_idx_xy_to_mn_limit[c2], std::min(16 * (c2 + 1), 100));
  }
  EXPECT_EQ(r.num_tokens_per_expert, (std::vector<int32_t>{0, 0, 0, 0, 0, 100, 0, 0}));
  for (int s = 100; s < 112; ++s) EXPECT_EQ(r.permuted_idx_to_token_idx[s], -1);
}

TEST(StepfunRoutingTables, HandComputedSmallCase) {
  // T=3, K=2, E=4, local experts [1, 3), tile 2. ids: t0 {1, 2}, t1 {2, 0}, t2 {3, 2}.
  const std::vector<int32_t> ids = {1, 2, 2, 0, 3, 2};
  RoutingConfig c = make_config(3, 2, 4, 1, 2, 2);
  const RoutingTables r = build_tables(c, ids.data());
  // cnt = {1 (expert 1), 3 (expert 2)}; numCta = {1, 2}; offsets {0, 1}.
  EXPECT_EQ(r.expanded_idx_to_permuted_idx, (std::vector<int32_t>{0, 2, 3, -1, -1, 4}));
  // max_ctas(3,2,4,2) = 4 + (6-4)/2 = 5; p2t holds 11 entries.
  EXPECT_EQ(r.permuted_idx_to_token_idx,
            (std::vector<int32_t>{0, -1, 0, 1, 2, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(r.cta_idx_xy_to_batch_idx, (std::vector<int32_t>{0, 1, 1, 0, 0}));
  EXPECT_EQ(r.cta_idx_xy_to_mn_limit, (std::vector<int32_t>{1, 4, 5, 6, 8}));
  EXPECT_EQ(r.num_non_exiting_ctas, 3);
  EXPECT_EQ(r.total_num_padded_tokens, 6);
  EXPECT_EQ(r.num_tokens_per_expert, (std::vector<int32_t>{1, 3}));
}

TEST(StepfunRoutingTables, NoLocalPairsAndOutOfRangeIds) {
  // Ids outside the local range, including ones outside [0, E), occupy no slot.
  const std::vector<int32_t> ids = {0, 7, -5, 12, 1, 6};
  RoutingConfig c = make_config(3, 2, 8, 2, 4, 8);
  const RoutingTables r = build_tables(c, ids.data());
  EXPECT_EQ(r.expanded_idx_to_permuted_idx, std::vector<int32_t>(6, -1));
  EXPECT_EQ(r.num_non_exiting_ctas, 0);
  EXPECT_EQ(r.total_num_padded_tokens, 0);
  EXPECT_EQ(r.num_tokens_per_expert, std::vector<int32_t>(4, 0));
  for (size_t cta = 0; cta < r.cta_idx_xy_to_batch_idx.size(); ++cta) {
    EXPECT_EQ(r.cta_idx_xy_to_batch_idx[cta], 0);
    EXPECT_EQ(r.cta_idx_xy_to_mn_limit[cta], static_cast<int32_t>(cta * 8));
  }
  for (int32_t token : r.permuted_idx_to_token_idx) EXPECT_EQ(token, -1);
}

TEST(StepfunRoutingTables, WorstCaseReachesMaxCtas) {
  // One pair on each of E experts plus q*tile more on expert 0: E + q CTAs = max_ctas.
  const int64_t E = 16, tile = 8, K = 1, q = 3, T = E + q * tile;
  std::vector<int32_t> ids;
  for (int64_t e = 0; e < E; ++e) ids.push_back(static_cast<int32_t>(e));
  for (int64_t i = 0; i < q * tile; ++i) ids.push_back(0);
  RoutingConfig c = make_config(T, K, E, 0, E, tile);
  const RoutingTables r = build_tables(c, ids.data());
  EXPECT_EQ(r.num_non_exiting_ctas, cakemoe::stepfun::max_ctas(T, K, E, tile));
  EXPECT_EQ(r.total_num_padded_tokens, cakemoe::stepfun::max_padded(T, K, E, tile));
}

/// Raw-buffer tables with every buffer one entry (or more) larger than needed and poisoned.
struct RawTables {
  std::vector<int32_t> e2p, p2t, batch, mn_limit, counts, scalars;
  RoutingTableViews views;
  RawTables(int64_t expanded, int64_t max_ctas, int64_t max_padded, int64_t E_loc, int64_t extra)
      : e2p(expanded + extra, kUnwritten), p2t(max_padded + 1 + extra, kUnwritten),
        batch(max_ctas + extra, kUnwritten), mn_limit(max_ctas + extra, kUnwritten),
        counts(E_loc + extra, kUnwritten), scalars(2, kUnwritten) {
    views.expanded_idx_to_permuted_idx = {e2p.data(), static_cast<int64_t>(e2p.size())};
    views.permuted_idx_to_token_idx = {p2t.data(), static_cast<int64_t>(p2t.size())};
    views.cta_idx_xy_to_batch_idx = {batch.data(), static_cast<int64_t>(batch.size())};
    views.cta_idx_xy_to_mn_limit = {mn_limit.data(), static_cast<int64_t>(mn_limit.size())};
    views.num_tokens_per_expert = {counts.data(), static_cast<int64_t>(counts.size())};
    views.num_non_exiting_ctas = &scalars[0];
    views.total_num_padded_tokens = &scalars[1];
  }
};

TEST(StepfunRoutingTables, RawBuffersTailsAndUntouchedEntries) {
  testbed::Rng rng(4);
  const int64_t T = 37, K = 4, E = 64, E_loc = 16, tile = 8, extra = 5;
  const std::vector<int32_t> ids = random_ids(rng, T, K, E);
  RoutingConfig c = make_config(T, K, E, 16, E_loc, tile);
  const int64_t max_ctas = cakemoe::stepfun::max_ctas(T, K, E, tile);
  const int64_t max_padded = max_ctas * tile;
  const RoutingTables want = brute_force(c, ids);

  RawTables benign(T * K, max_ctas, max_padded, E_loc, extra);
  build_tables(c, ids.data(), benign.views);
  EXPECT_TRUE(std::equal(want.cta_idx_xy_to_batch_idx.begin(),
                         want.cta_idx_xy_to_batch_idx.end(), benign.batch.begin()));
  EXPECT_TRUE(std::equal(want.cta_idx_xy_to_mn_limit.begin(), want.cta_idx_xy_to_mn_limit.end(),
                         benign.mn_limit.begin()));
  EXPECT_TRUE(std::equal(want.permuted_idx_to_token_idx.begin(),
                         want.permuted_idx_to_token_idx.end(), benign.p2t.begin()));
  EXPECT_EQ(benign.scalars[0], want.num_non_exiting_ctas);
  // Entries past T*K, max_ctas, max_padded + 1 and E_loc are never written.
  for (int64_t i = 0; i < extra; ++i) {
    EXPECT_EQ(benign.e2p[T * K + i], kUnwritten);
    EXPECT_EQ(benign.batch[max_ctas + i], kUnwritten);
    EXPECT_EQ(benign.mn_limit[max_ctas + i], kUnwritten);
    EXPECT_EQ(benign.p2t[max_padded + 1 + i], kUnwritten);
    EXPECT_EQ(benign.counts[E_loc + i], kUnwritten);
  }

  c.poison_tail = true;
  RawTables poisoned(T * K, max_ctas, max_padded, E_loc, 0);
  build_tables(c, ids.data(), poisoned.views);
  const int32_t live = want.num_non_exiting_ctas;
  ASSERT_LT(live, max_ctas);
  for (int64_t cta = 0; cta < max_ctas; ++cta) {
    EXPECT_EQ(poisoned.batch[cta], cta < live ? want.cta_idx_xy_to_batch_idx[cta] : kTailPoison);
    EXPECT_EQ(poisoned.mn_limit[cta], cta < live ? want.cta_idx_xy_to_mn_limit[cta] : kTailPoison);
  }
  for (int64_t s = 0; s <= max_padded; ++s) {
    EXPECT_EQ(poisoned.p2t[s], s < want.total_num_padded_tokens
                                   ? want.permuted_idx_to_token_idx[s] : kTailPoison) << s;
  }
  EXPECT_EQ(poisoned.e2p, want.expanded_idx_to_permuted_idx);

  // Optional counts; a p2t of exactly max_padded entries (no "+1") is accepted.
  RawTables minimal(T * K, max_ctas, max_padded - 1, E_loc, 0);
  minimal.views.num_tokens_per_expert = {};
  c.poison_tail = false;
  build_tables(c, ids.data(), minimal.views);
  EXPECT_EQ(minimal.counts, std::vector<int32_t>(E_loc, kUnwritten));
  EXPECT_EQ(minimal.p2t.back(), -1);
}

TEST(StepfunRoutingTables, TooSmallBuffersThrowBeforeWriting) {
  const int64_t T = 10, K = 2, E = 8, tile = 8;
  std::vector<int32_t> ids(T * K);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % E);
  RoutingConfig c = make_config(T, K, E, 0, E, tile);
  const int64_t max_ctas = cakemoe::stepfun::max_ctas(T, K, E, tile);
  const int64_t max_padded = max_ctas * tile;
  const char* names[] = {"expanded_idx_to_permuted_idx", "permuted_idx_to_token_idx",
                         "cta_idx_xy_to_batch_idx", "cta_idx_xy_to_mn_limit",
                         "num_tokens_per_expert"};
  for (int which = 0; which < 5; ++which) {
    RawTables raw(T * K, max_ctas, max_padded, E, 0);
    Int32Span* spans[] = {&raw.views.expanded_idx_to_permuted_idx,
                          &raw.views.permuted_idx_to_token_idx,
                          &raw.views.cta_idx_xy_to_batch_idx, &raw.views.cta_idx_xy_to_mn_limit,
                          &raw.views.num_tokens_per_expert};
    spans[which]->size -= which == 1 ? 2 : 1;  // p2t needs max_padded, not max_padded + 1
    try {
      build_tables(c, ids.data(), raw.views);
      ADD_FAILURE() << "no throw for " << names[which];
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), names[which]);
    }
    for (const auto* v : {&raw.e2p, &raw.p2t, &raw.batch, &raw.mn_limit, &raw.counts,
                          &raw.scalars}) {
      for (int32_t x : *v) ASSERT_EQ(x, kUnwritten) << names[which];
    }
  }
}

TEST(StepfunRoutingTables, ZeroTokens) {
  RoutingConfig c = make_config(0, 2, 8, 0, 8, 8);
  const RoutingTables r = build_tables(c, nullptr);
  EXPECT_EQ(r.num_non_exiting_ctas, 0);
  EXPECT_EQ(r.total_num_padded_tokens, 0);
  EXPECT_TRUE(r.cta_idx_xy_to_batch_idx.empty());
  EXPECT_EQ(r.permuted_idx_to_token_idx, std::vector<int32_t>{-1});
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
