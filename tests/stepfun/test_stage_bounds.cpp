// Regression tests of issue 25 for the StepFun stage entry points on the CPU engine: each finding
// (huge tile, overflowing local range, counts past the CTA tables, null data, non-finite scalars,
// out-of-range enums, inexact [1] scalars and FC1 rows, repeated precomputed ids) gets a typed
// error naming the argument, before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "stepfun/validate.h"
#include "testbed/expect_error.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {

using testbed::expect_error;

constexpr int64_t kT = 6, kK = 2, kE = 4, kH = 128, kI = 64, kTile = 8;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// A bf16 problem bound stage by stage over host buffers (routing by logits).
struct Chain {
  std::vector<Tensor> keep;
  RoutingArgs r;
  Fc1Args f1;
  Fc2Args f2;
  FinalizeArgs fin;

  TensorView make(const std::vector<int64_t>& shape, DType dtype) {
    keep.push_back(Tensor::empty(shape, dtype));
    testbed::poison(keep.back());
    return keep.back();
  }
  TensorView random(const std::vector<int64_t>& shape, uint64_t seed, float scale) {
    testbed::Rng rng(seed);
    keep.push_back(testbed::random_bf16(shape, rng, scale));
    return keep.back();
  }

  Chain() {
    const int64_t rows = max_padded(kT, kK, kE, kTile), ctas = max_ctas(kT, kK, kE, kTile);
    WeightPrepOptions o;
    o.family = Family::kBF16;
    const StepFunWeights w =
        prepare_weights(random({kE, 2 * kI, kH}, 1, 0.1f), random({kE, kH, kI}, 2, 0.1f), o);
    for (const Tensor& t : {w.gemm1_weights, w.gemm2_weights, w.gemm1_clamp_limit})
      keep.push_back(t);
    r.routing_logits = random({kT, kE}, 3, 1.0f);
    r.topk_weights = make({kT, kK}, DType::kBF16);
    r.topk_packed = make({kT, kK}, DType::kInt32);
    r.expert_count_histogram = make({512}, DType::kInt32);
    r.total_num_padded_tokens = make({1}, DType::kInt32);
    r.expanded_idx_to_permuted_idx = make({kT * kK}, DType::kInt32);
    r.permuted_idx_to_token_idx = make({rows + 1}, DType::kInt32);
    r.cta_idx_xy_to_batch_idx = make({ctas}, DType::kInt32);
    r.cta_idx_xy_to_mn_limit = make({ctas}, DType::kInt32);
    r.num_non_exiting_ctas = make({1}, DType::kInt32);
    r.num_experts = r.local_num_experts = kE;
    r.top_k = kK;
    r.tile_tokens_dim = kTile;

    f1.family = f2.family = Family::kBF16;
    f1.hidden_states = random({kT, kH}, 4, 1.0f);
    f1.gemm1_weights = w.gemm1_weights;
    f1.gemm1_clamp_limit = w.gemm1_clamp_limit;
    f1.permuted_idx_to_token_idx = r.permuted_idx_to_token_idx;
    f1.cta_idx_xy_to_batch_idx = f2.cta_idx_xy_to_batch_idx = r.cta_idx_xy_to_batch_idx;
    f1.cta_idx_xy_to_mn_limit = f2.cta_idx_xy_to_mn_limit = r.cta_idx_xy_to_mn_limit;
    f1.num_non_exiting_ctas = f2.num_non_exiting_ctas = r.num_non_exiting_ctas;
    f1.total_num_padded_tokens = r.total_num_padded_tokens;
    f1.gemm1_output = make({rows, kI}, DType::kBF16);
    f1.top_k = f2.top_k = kK;
    f1.tile_tokens_dim = f2.tile_tokens_dim = kTile;
    f2.gemm2_input = f1.gemm1_output;
    f2.gemm2_weights = w.gemm2_weights;
    f2.gemm2_output = make({rows, kH}, DType::kBF16);
    f2.num_tokens = kT;

    fin.gemm2_output = f2.gemm2_output;
    fin.expert_weights = r.topk_weights;
    fin.expanded_idx_to_permuted_idx = r.expanded_idx_to_permuted_idx;
    fin.total_num_padded_tokens = r.total_num_padded_tokens;
    fin.output = make({kT, kH}, DType::kBF16);
    fin.num_experts = kE;
  }
};

/// Bytes of a view, to show that a rejected call wrote nothing.
std::vector<uint8_t> bytes_of(const TensorView& t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + t.nbytes());
}

template <typename Args>
void expect_rejected(const Args& valid, const std::function<void(Args&)>& mutate,
                     const std::function<void(const Args&)>& call, const std::string& argument) {
  Args bad = valid;
  mutate(bad);
  expect_error([&] { call(bad); }, argument);
}

using RoutingEdit = std::function<void(RoutingArgs&)>;
const auto kPrepareRouting = [](const RoutingArgs& a) { prepare_routing(a); };

TEST(StageBounds, ChainRunsOnTheCpu) {
  Chain c;
  routing(c.r);
  fc1(c.f1);
  fc2(c.f2);
  finalize(c.fin);
  for (int64_t i = 0; i < kT * kH; ++i) ASSERT_NE(c.fin.output.ptr<uint16_t>()[i], 0xFFFF) << i;
}

TEST(StageBounds, HugeTileIsRejectedBeforeTheTablesAreSized) {
  // max_ctas * tile used to wrap: prepare passed with small tables and launch wrote past them.
  Chain c;
  for (int64_t tile : {int64_t{1} << 60, kInt64Max, kMaxTileTokensDim + 1}) {
    expect_rejected<RoutingArgs>(c.r,
                                 RoutingEdit([&](RoutingArgs& a) { a.tile_tokens_dim = tile; }),
                                 kPrepareRouting, "tile_tokens_dim");
    Fc1Args f1 = c.f1;
    f1.tile_tokens_dim = tile;
    expect_error([&] { prepare_fc1(f1); }, "tile_tokens_dim");
    Fc2Args f2 = c.f2;
    f2.tile_tokens_dim = tile;
    expect_error([&] { prepare_fc2(f2); }, "tile_tokens_dim");
  }
  // In range, but max_padded + 1 (E * tile) past int32: named too, never wrapped.
  expect_error([] { table_sizes(2048, 32, kMaxNumExperts, kMaxTileTokensDim); }, "tile_tokens_dim");
  expect_error([] { max_padded(4, 2, 8, int64_t{1} << 40); }, "tile_tokens_dim");
}

TEST(StageBounds, LocalRangeSumCannotOverflow) {
  Chain c;
  expect_rejected<RoutingArgs>(c.r, RoutingEdit([](RoutingArgs& a) {
                                 a.local_expert_offset = 1;
                                 a.local_num_experts = kInt64Max;
                               }),
                               kPrepareRouting, "local_num_experts");
  expect_rejected<RoutingArgs>(c.r, RoutingEdit([](RoutingArgs& a) {
                                 a.local_expert_offset = kInt64Max;
                                 a.local_num_experts = 1;
                               }),
                               kPrepareRouting, "local_num_experts");
}

TEST(StageBounds, NonFiniteScalarsAndRequantOperands) {
  Chain c;
  const double inf = std::numeric_limits<double>::infinity();
  for (double s : {inf, std::nan("")}) {
    expect_rejected<RoutingArgs>(c.r,
                                 RoutingEdit([s](RoutingArgs& a) { a.routed_scaling_factor = s; }),
                                 kPrepareRouting, "routed_scaling_factor");
  }
  RequantArgs q;
  q.gemm1_output = c.f1.gemm1_output;
  q.expanded_idx_to_permuted_idx = c.r.expanded_idx_to_permuted_idx;
  const int64_t rows = c.f1.gemm1_output.shape[0];
  q.output = c.make({rows, kI / 2}, DType::kUInt8);
  q.output_scale = c.make({rows * kI / 16}, DType::kUInt8);
  q.per_token_scale = c.make({rows}, DType::kFP32);
  EXPECT_NO_THROW(prepare_requant(q));
  for (double s : {inf, std::nan(""), 0.0}) {
    RequantArgs bad = q;
    bad.global_scale_inv = s;
    expect_error([&] { prepare_requant(bad); }, "global_scale_inv");
  }
  RequantArgs null_output = q;  // null data with a shape used to pass validation
  null_output.output.data = nullptr;
  expect_error([&] { prepare_requant(null_output); }, "output");
  RequantArgs bad_layout = q;
  bad_layout.sf_layout = static_cast<SfLayout>(9);  // used to be treated as linear
  expect_error([&] { prepare_requant(bad_layout); }, "sf_layout");
}

TEST(StageBounds, DeviceScalarsAreExactlyOneElement) {
  Chain c;
  const TensorView four = c.make({4}, DType::kInt32);
  expect_rejected<RoutingArgs>(c.r,
                               RoutingEdit([&](RoutingArgs& a) { a.num_non_exiting_ctas = four; }),
                               kPrepareRouting, "num_non_exiting_ctas");
  expect_rejected<RoutingArgs>(
      c.r, RoutingEdit([&](RoutingArgs& a) { a.total_num_padded_tokens = four; }), kPrepareRouting,
      "total_num_padded_tokens");
  FinalizeArgs fin = c.fin;
  fin.total_num_padded_tokens = four;
  expect_error([&] { prepare_finalize(fin); }, "total_num_padded_tokens");
}

TEST(StageBounds, NullDataAndNegativeSizesAreRejected) {
  Chain c;
  expect_rejected<RoutingArgs>(c.r,
                               RoutingEdit([](RoutingArgs& a) { a.routing_logits.data = nullptr; }),
                               kPrepareRouting, "routing_logits");
  expect_rejected<RoutingArgs>(
      c.r, RoutingEdit([](RoutingArgs& a) { a.expanded_idx_to_permuted_idx.data = nullptr; }),
      kPrepareRouting, "expanded_idx_to_permuted_idx");
  expect_rejected<RoutingArgs>(c.r,
                               RoutingEdit([](RoutingArgs& a) { a.topk_weights.shape[0] = -1; }),
                               kPrepareRouting, "topk_weights");
  Fc1Args f1 = c.f1;
  f1.hidden_states.data = nullptr;
  expect_error([&] { prepare_fc1(f1); }, "hidden_states");
  FinalizeArgs fin = c.fin;
  fin.expert_weights.data = nullptr;
  expect_error([&] { prepare_finalize(fin); }, "expert_weights");
  fin = c.fin;
  fin.num_experts = int64_t{1} << 40;
  expect_error([&] { prepare_finalize(fin); }, "num_experts");
}

TEST(StageBounds, AMalformedViewTheModeIgnoresIsNamed) {
  // Precomputed ids make topk_packed unused; a malformed one is still an error, also when its
  // null data and negative ndim once made it read as absent.
  Chain c;
  RoutingArgs r = c.r;
  r.routing_logits = TensorView();
  r.topk_ids = TensorView(c.r.topk_packed.data, DType::kInt32, {kT, kK});
  r.topk_weights = c.r.topk_weights;
  r.topk_packed = TensorView();
  r.topk_packed.ndim = -3;
  expect_error([&] { prepare_routing(r); }, "topk_packed");
  r.topk_packed = TensorView();
  r.topk_packed.dtype = static_cast<DType>(49);
  expect_error([&] { prepare_routing(r); }, "topk_packed");
}

TEST(StageBounds, InvalidFamilyIsNamed) {
  Chain c;
  Fc1Args f1 = c.f1;
  f1.family = static_cast<Family>(148);
  expect_error([&] { prepare_fc1(f1); }, "family");
  Fc2Args f2 = c.f2;
  f2.family = static_cast<Family>(148);
  expect_error([&] { prepare_fc2(f2); }, "family");
}

TEST(StageBounds, Fc1OutputHasExactlyMaxPaddedRows) {
  Chain c;
  const int64_t rows = max_padded(kT, kK, kE, kTile);
  Fc1Args f1 = c.f1;
  f1.gemm1_output = c.make({rows + kTile, kI}, DType::kBF16);  // used to be accepted (>=)
  expect_error([&] { prepare_fc1(f1); }, "gemm1_output");
  // FC2 still reads at least max_padded rows.
  Fc2Args f2 = c.f2;
  f2.gemm2_input = f1.gemm1_output;
  EXPECT_NO_THROW(prepare_fc2(f2));
}

TEST(StageBounds, LiveCtaCountPastTheTablesFailsBeforeWriting) {
  // The entries of the CTA tables were checked, their count was not: a read past the tables.
  Chain c;
  routing(c.r);
  const int32_t live = *c.r.num_non_exiting_ctas.ptr<int32_t>();
  ASSERT_GT(live, 0);
  *c.r.num_non_exiting_ctas.ptr<int32_t>() =
      static_cast<int32_t>(c.r.cta_idx_xy_to_batch_idx.numel() + 1);
  const StepFunStageLaunch fc1_launch = prepare_fc1(c.f1);
  const std::vector<uint8_t> before1 = bytes_of(c.f1.gemm1_output);
  expect_error([&] { fc1_launch.launch(); }, "num_non_exiting_ctas");
  EXPECT_EQ(bytes_of(c.f1.gemm1_output), before1);
  const StepFunStageLaunch fc2_launch = prepare_fc2(c.f2);
  const std::vector<uint8_t> before2 = bytes_of(c.f2.gemm2_output);
  expect_error([&] { fc2_launch.launch(); }, "num_non_exiting_ctas");
  EXPECT_EQ(bytes_of(c.f2.gemm2_output), before2);
  *c.r.num_non_exiting_ctas.ptr<int32_t>() = live;
  EXPECT_NO_THROW(fc1_launch.launch());
}

TEST(StageBounds, PrecomputedIdsMustBeDistinctPerToken) {
  Chain c;
  Tensor ids = Tensor::empty({kT, kK}, DType::kInt32);
  for (int64_t t = 0; t < kT; ++t) {
    ids.ptr<int32_t>()[t * kK] = static_cast<int32_t>(t % kE);
    ids.ptr<int32_t>()[t * kK + 1] = static_cast<int32_t>((t + 1) % kE);
  }
  Tensor weights = Tensor::empty({kT, kK}, DType::kFP32);
  std::fill(weights.ptr<float>(), weights.ptr<float>() + kT * kK, 0.5f);
  RoutingArgs r = c.r;
  r.routing_logits = TensorView();
  r.topk_packed = TensorView();
  r.topk_ids = ids;
  r.topk_weights = weights;
  const StepFunStageLaunch launch = prepare_routing(r);
  EXPECT_NO_THROW(launch.launch());
  ids.ptr<int32_t>()[3 * kK + 1] = ids.ptr<int32_t>()[3 * kK];  // token 3 repeats its expert
  testbed::poison(r.expanded_idx_to_permuted_idx);
  const std::vector<uint8_t> before = bytes_of(r.expanded_idx_to_permuted_idx);
  expect_error([&] { launch.launch(); }, "topk_ids");
  EXPECT_EQ(bytes_of(r.expanded_idx_to_permuted_idx), before);
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
