// The EP algorithm end to end on the CPU: a simulated world of N ranks, each running the CPU
// StepFun layer on its expert slice over the rows the planning functions dispatched to it
// (transport: the NCCL schedules carried out by memcpy). The combined output must pass the
// family's acceptance check against the fp64 oracle and, with one rank, equal the plain layer bit
// for bit. NCCL and the device kernels are not involved (their GPU tests are).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "formats/codecs.h"
#include "reference/stepfun/harness.h"
#include "stepfun/ep/dispatch_plan.h"
#include "stepfun/ep_world_sim.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {
namespace ref = reference::stepfun;

ref::LayerCase sim_case(Family f, bool precomputed) {
  ref::LayerCase c;
  c.family = f;
  c.num_tokens = 24;
  c.hidden = 256;
  c.intermediate = 128;
  c.num_experts = 8;
  c.top_k = 2;
  c.precomputed = precomputed;
  c.precomputed_fp32 = f != Family::kBF16;
  c.regime = ref::RoutingRegime::kRagged;
  return c;
}

/// Experts [off, off + n) of an expert-major weight tensor.
TensorView expert_slice(const TensorView& t, int64_t off, int64_t n) {
  if (!t.defined()) return TensorView();
  return sim::row_slice(t, off, n);
}

/// A [rows, ...] host tensor shaped like the per-token tensor `like`, filled with `byte`.
Tensor rows_like(const TensorView& like, int64_t rows, int byte) {
  std::vector<int64_t> shape = like.sizes();
  shape[0] = rows;
  Tensor t = Tensor::empty(shape, like.dtype);
  std::memset(t.data(), byte, t.nbytes());
  return t;
}

struct Rank {
  TensorView own[kNumFields];  // the own tokens' rows per field
  Tensor routed[2];            // logits mode: the router's ids (unpacked) and weights
  Tensor send[kNumFields], recv[kNumFields];
  Tensor partials, combine_recv;
  DispatchPlan plan;
  std::vector<int32_t> counts_in;
  EpSizes sizes;
};

/// The rank's top-k from its logits with the CPU router (packed ids unpacked).
void route_own_tokens(const MoeArgs& a, int64_t t, Rank* rank) {
  const int64_t k = a.top_k, e = a.num_experts;
  RoutingArgs r;
  r.routing_logits = a.routing_logits;
  Tensor packed = Tensor::empty({t, k}, DType::kInt32);
  rank->routed[1] = Tensor::empty({t, k}, DType::kBF16);
  r.topk_weights = rank->routed[1];
  r.topk_packed = packed;
  std::vector<Tensor> tables = {Tensor::empty({std::max<int64_t>(2 * e, 512)}, DType::kInt32),
                                Tensor::empty({1}, DType::kInt32),
                                Tensor::empty({t * k}, DType::kInt32),
                                Tensor::empty({max_padded(t, k, e, 8) + 1}, DType::kInt32),
                                Tensor::empty({max_ctas(t, k, e, 8)}, DType::kInt32),
                                Tensor::empty({max_ctas(t, k, e, 8)}, DType::kInt32),
                                Tensor::empty({1}, DType::kInt32)};
  r.expert_count_histogram = tables[0];
  r.total_num_padded_tokens = tables[1];
  r.expanded_idx_to_permuted_idx = tables[2];
  r.permuted_idx_to_token_idx = tables[3];
  r.cta_idx_xy_to_batch_idx = tables[4];
  r.cta_idx_xy_to_mn_limit = tables[5];
  r.num_non_exiting_ctas = tables[6];
  r.num_experts = e;
  r.top_k = k;
  r.local_num_experts = 1;  // as the GPU layer: only the top-k is used
  r.routed_scaling_factor = a.routed_scaling_factor;
  routing(r);
  rank->routed[0] = Tensor::empty({t, k}, DType::kInt32);
  for (int64_t i = 0; i < t * k; ++i) {
    rank->routed[0].ptr<int32_t>()[i] =
        static_cast<int32_t>(static_cast<uint32_t>(packed.ptr<int32_t>()[i]) >> 16);
  }
}

/// Runs the EP layer over `tokens` (per rank, summing to the case's T) and returns the
/// concatenated bf16 output [T, H].
std::vector<uint16_t> run_world(const MoeArgs& full, const std::vector<int64_t>& tokens,
                                Scheme scheme) {
  const int world = static_cast<int>(tokens.size());
  const ExpertPartition partition = even_partition(full.num_experts, world);
  const int64_t k = full.top_k, h = full.hidden_states.shape[1] *
                                    (full.hidden_states.dtype == DType::kE2M1x2 ? 2 : 1);
  std::vector<Rank> ranks(world);
  FieldLayout fields;
  int64_t start = 0;
  for (int r = 0; r < world; ++r) {
    Rank& rank = ranks[r];
    const int64_t t = tokens[r];
    rank.own[kHidden] = sim::row_slice(full.hidden_states, start, t);
    rank.own[kHiddenScale] = sim::row_slice(full.hidden_states_scale, start, t);
    rank.own[kPerTokenScale] = sim::row_slice(full.per_token_scale, start, t);
    if (full.routing_logits.defined()) {
      MoeArgs mine = full;
      mine.routing_logits = sim::row_slice(full.routing_logits, start, t);
      route_own_tokens(mine, t, &rank);
      rank.own[kTopkIds] = rank.routed[0];
      rank.own[kTopkWeights] = rank.routed[1];
    } else {
      rank.own[kTopkIds] = sim::row_slice(full.topk_ids, start, t);
      rank.own[kTopkWeights] = sim::row_slice(full.topk_weights, start, t);
    }
    for (int f = 0; f < kNumFields; ++f) {
      fields.row_bytes[f] = rank.own[f].defined() ? rank.own[f].nbytes() / t : 0;
    }
    start += t;
  }
  std::vector<sim::RankBuffers> bufs(world);
  std::vector<std::vector<P2pOp>> counts_ops, payload_ops, back_ops;
  for (int r = 0; r < world; ++r) {
    Rank& rank = ranks[r];
    rank.sizes = ep_sizes(scheme, r, tokens, fields, h);
    const int64_t rows = rank.sizes.rows_per_peer, layer = rank.sizes.layer_rows;
    for (int f = 0; f < kNumFields; ++f) {
      if (!fields.present(f)) continue;
      // All-to-all: received ids start as expert 0 (stale but valid), so the test fails unless
      // the mask removes the rows no source filled. All-gather: rows past a rank's T arrive as
      // -1 (its staging rows).
      const int stale = scheme == Scheme::kAllToAll ? 0x00 : 0xFF;
      rank.recv[f] = rows_like(rank.own[f], layer, f == kTopkIds ? stale : 0);
      rank.send[f] = rows_like(rank.own[f], layer, 0);
      bufs[r].send[f] = rank.send[f].ptr<uint8_t>();
      bufs[r].recv[f] = rank.recv[f].ptr<uint8_t>();
      bufs[r].send_bytes[f] = bufs[r].recv_bytes[f] = static_cast<int64_t>(rank.send[f].nbytes());
    }
    rank.plan = plan_dispatch(partition, rank.own[kTopkIds].ptr<int32_t>(), tokens[r], k, rows);
    rank.counts_in.assign(world, 0);
    bufs[r].send[kCountsBuffer] = reinterpret_cast<uint8_t*>(rank.plan.send_counts.data());
    bufs[r].recv[kCountsBuffer] = reinterpret_cast<uint8_t*>(rank.counts_in.data());
    bufs[r].send_bytes[kCountsBuffer] = bufs[r].recv_bytes[kCountsBuffer] = 4 * world;
    counts_ops.push_back(counts_exchange_ops(world));
    payload_ops.push_back(dispatch_ops(rank.sizes, fields));
    back_ops.push_back(combine_ops(rank.sizes));
  }

  // Dispatch: all-to-all packs per destination; all-gather copies every rank's rows to region r
  // (rows past its T keep ids -1), which is what ncclAllGather of the staging rows delivers.
  for (int r = 0; r < world; ++r) {
    Rank& rank = ranks[r];
    std::vector<RowCopy> copies;
    for (int f = 0; f < kNumFields; ++f) {
      if (!fields.present(f)) continue;
      copies.push_back(
          RowCopy{rank.own[f].ptr<uint8_t>(), rank.send[f].ptr<uint8_t>(), fields.row_bytes[f]});
    }
    if (scheme == Scheme::kAllToAll) pack_rows_host(rank.plan, copies);
  }
  if (scheme == Scheme::kAllToAll) {
    sim::run_groups(counts_ops, bufs);
    sim::run_groups(payload_ops, bufs);
    for (Rank& rank : ranks) {
      mask_received_ids_host(rank.recv[kTopkIds].ptr<int32_t>(), rank.counts_in.data(), world,
                             rank.sizes.rows_per_peer, k);
    }
  } else {
    for (Rank& dst : ranks) {
      for (int s = 0; s < world; ++s) {
        for (int f = 0; f < kNumFields; ++f) {
          if (!fields.present(f)) continue;
          const int64_t region = s * dst.sizes.rows_per_peer * fields.row_bytes[f];
          std::memcpy(dst.recv[f].ptr<uint8_t>() + region, ranks[s].own[f].data,
                      static_cast<size_t>(tokens[s] * fields.row_bytes[f]));
        }
      }
    }
  }

  // The local layers.
  for (int p = 0; p < world; ++p) {
    Rank& rank = ranks[p];
    const int64_t off = partition.offsets[p], n = partition.offsets[p + 1] - off;
    MoeArgs layer = full;
    for (TensorView* w :
         {&layer.gemm1_weights, &layer.gemm1_weights_scale, &layer.gemm2_weights,
          &layer.gemm2_weights_scale, &layer.output1_scale_scalar, &layer.output1_scale_gate_scalar,
          &layer.output2_scale_scalar, &layer.gemm1_clamp_limit}) {
      *w = expert_slice(*w, off, n);
    }
    layer.local_expert_offset = off;
    layer.local_num_experts = n;
    layer.hidden_states = rank.recv[kHidden];
    layer.hidden_states_scale =
        fields.present(kHiddenScale) ? rank.recv[kHiddenScale].view() : TensorView();
    layer.per_token_scale =
        fields.present(kPerTokenScale) ? rank.recv[kPerTokenScale].view() : TensorView();
    layer.routing_logits = TensorView();
    layer.topk_ids = rank.recv[kTopkIds];
    layer.topk_weights = rank.recv[kTopkWeights];
    rank.partials = Tensor::empty({rank.sizes.layer_rows, h}, DType::kBF16);
    layer.output = rank.partials;
    prepare_stepfun_moe(layer).launch();
    rank.combine_recv = Tensor::empty({rank.sizes.layer_rows, h}, DType::kBF16);
    bufs[p].send[kPartialBuffer] = rank.partials.ptr<uint8_t>();
    bufs[p].recv[kPartialBuffer] = rank.combine_recv.ptr<uint8_t>();
    bufs[p].send_bytes[kPartialBuffer] = bufs[p].recv_bytes[kPartialBuffer] =
        static_cast<int64_t>(rank.partials.nbytes());
  }

  // Combine: all-to-all per the plan; all-gather as a reduce-scatter summing the ranks in order.
  std::vector<uint16_t> out;
  if (scheme == Scheme::kAllToAll) {
    sim::run_groups(back_ops, bufs);
    for (Rank& rank : ranks) {
      std::vector<uint16_t> mine(static_cast<size_t>(rank.sizes.num_tokens * h));
      combine_host(rank.plan, rank.combine_recv.ptr<uint16_t>(), h, mine.data());
      out.insert(out.end(), mine.begin(), mine.end());
    }
    return out;
  }
  for (int r = 0; r < world; ++r) {
    for (int64_t t = 0; t < tokens[r]; ++t) {
      const int64_t row = r * ranks[r].sizes.rows_per_peer + t;
      for (int64_t c = 0; c < h; ++c) {
        float acc = 0.f;
        for (const Rank& d : ranks) {
          acc += formats::bf16_to_float(d.partials.ptr<uint16_t>()[row * h + c]);
        }
        out.push_back(formats::bf16_from_float(acc));
      }
    }
  }
  return out;
}

struct SimParam {
  Family family;
  bool precomputed;
  Scheme scheme;
};

class EpLayerSim : public ::testing::TestWithParam<SimParam> {};

TEST_P(EpLayerSim, ThreeRanksPassTheOracleCheck) {
  const SimParam p = GetParam();
  const ref::LayerData data = ref::make_layer(sim_case(p.family, p.precomputed));
  const std::vector<uint16_t> out = run_world(ref::layer_args(data), {10, 8, 6}, p.scheme);
  ASSERT_EQ(out.size(), static_cast<size_t>(24 * 256));
  const ref::LayerCheck check = ref::check_layer_output(data, out.data());
  EXPECT_TRUE(check.pass) << data.config.describe() << ": " << check.summary();
}

TEST_P(EpLayerSim, OneRankEqualsThePlainLayerBitForBit) {
  const SimParam p = GetParam();
  const ref::LayerData data = ref::make_layer(sim_case(p.family, p.precomputed));
  const MoeArgs args = ref::layer_args(data);
  const std::vector<Tensor> plain = stepfun_moe(args);
  const std::vector<uint16_t> out = run_world(args, {24}, p.scheme);
  ASSERT_EQ(out.size() * 2, plain[0].nbytes());
  EXPECT_EQ(std::memcmp(out.data(), plain[0].data(), plain[0].nbytes()), 0);
}

std::vector<SimParam> sim_params() {
  std::vector<SimParam> v;
  for (Family f : kAllFamilies) {
    v.push_back({f, true, Scheme::kAllToAll});
    v.push_back({f, false, Scheme::kAllToAll});
  }
  v.push_back({Family::kNVFP4, false, Scheme::kAllGather});
  v.push_back({Family::kBF16, true, Scheme::kAllGather});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Families, EpLayerSim, ::testing::ValuesIn(sim_params()),
                         [](const auto& info) {
                           return std::string(family_name(info.param.family)) +
                                  (info.param.precomputed ? "_ids_" : "_logits_") +
                                  scheme_name(info.param.scheme);
                         });

}  // namespace
}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
