// Every stage entry point rejects bad input with InvalidArgument naming the argument, before
// anything is written (spec §9.3).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "formats/layouts.h"
#include "reference/stepfun/families.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {

constexpr int64_t kT = 6, kK = 2, kE = 4, kH = 128, kI = 64, kTile = 8;

/// Owns host buffers for one problem; views are handed out by `make`.
struct Pool {
  std::vector<Tensor> tensors;
  TensorView make(std::vector<int64_t> shape, DType dtype) {
    tensors.push_back(Tensor::empty(shape, dtype));
    testbed::poison(tensors.back());
    return tensors.back();
  }
};

bool is_nvfp4(Family f) { return f == Family::kNVFP4 || f == Family::kNVFP4BF16Tok; }

/// A valid FC1 argument set for `family` (contents are poison: validation never reads them).
Fc1Args valid_fc1(Pool& pool, Family f) {
  const int64_t rows = max_padded(kT, kK, kE, kTile), ctas = max_ctas(kT, kK, kE, kTile);
  Fc1Args a;
  a.family = f;
  if (is_nvfp4(f)) {
    a.hidden_states = pool.make({kT, kH / 2}, DType::kE2M1x2);
    a.hidden_states_scale = pool.make({kT, kH / 16}, DType::kE4M3);
    a.gemm1_weights = pool.make({kE, 2 * kI, kH / 2}, DType::kE2M1x2);
    a.gemm1_weights_scale = pool.make({kE * formats::sf_size_128x4(2 * kI, kH / 16)}, DType::kE4M3);
  } else if (f == Family::kMXFP8) {
    a.hidden_states = pool.make({kT, kH}, DType::kE4M3);
    a.hidden_states_scale = pool.make({kT, kH / 32}, DType::kUE8M0);
    a.gemm1_weights = pool.make({kE, 2 * kI, kH}, DType::kE4M3);
    a.gemm1_weights_scale =
        pool.make({kE * formats::sf_size_128x4(2 * kI, kH / 32)}, DType::kUE8M0);
  } else if (f == Family::kFP8) {
    a.hidden_states = pool.make({kT, kH}, DType::kE4M3);
    a.gemm1_weights = pool.make({kE, 2 * kI, kH}, DType::kE4M3);
  } else {
    a.hidden_states = pool.make({kT, kH}, DType::kBF16);
    a.gemm1_weights = pool.make({kE, kH / 64, 2 * kI, 64}, DType::kBF16);
  }
  if (is_nvfp4(f) || f == Family::kFP8) {
    a.output1_scale_scalar = pool.make({kE}, DType::kFP32);
    a.output1_scale_gate_scalar = pool.make({kE}, DType::kFP32);
  }
  a.gemm1_clamp_limit = pool.make({kE}, DType::kFP32);
  if (f == Family::kNVFP4BF16Tok) a.per_token_scale = pool.make({kT}, DType::kFP32);
  a.permuted_idx_to_token_idx = pool.make({rows + 1}, DType::kInt32);
  a.cta_idx_xy_to_batch_idx = pool.make({ctas}, DType::kInt32);
  a.cta_idx_xy_to_mn_limit = pool.make({ctas}, DType::kInt32);
  a.num_non_exiting_ctas = pool.make({1}, DType::kInt32);
  a.total_num_padded_tokens = pool.make({1}, DType::kInt32);
  if (f == Family::kNVFP4) {
    a.gemm1_output = pool.make({rows, kI / 2}, DType::kE2M1x2);
    a.gemm1_output_scale = pool.make({formats::sf_size_r8c4(rows, kI / 16)}, DType::kE4M3);
  } else if (f == Family::kMXFP8 || f == Family::kFP8) {
    a.gemm1_output = pool.make({rows, kI}, DType::kE4M3);
    if (f == Family::kMXFP8) {
      a.gemm1_output_scale = pool.make({formats::sf_size_r8c4(rows, kI / 32)}, DType::kUE8M0);
    }
  } else {
    a.gemm1_output = pool.make({rows, kI}, DType::kBF16);
  }
  a.top_k = kK;
  a.tile_tokens_dim = kTile;
  return a;
}

template <typename Args, typename Prepare>
void expect_rejected(const Args& valid, const std::function<void(Args&)>& mutate,
                     const std::string& argument, Prepare prepare, const std::string& label) {
  Args bad = valid;
  mutate(bad);
  try {
    prepare(bad);
    ADD_FAILURE() << label << ": expected InvalidArgument naming " << argument;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), argument) << label << ": " << e.what();
  }
}

TEST(Fc1Validation, ValidArgumentsBind) {
  for (Family f : kAllFamilies) {
    Pool pool;
    EXPECT_NO_THROW(prepare_fc1(valid_fc1(pool, f))) << family_name(f);
  }
}

TEST(Fc1Validation, RejectsEachBrokenRule) {
  using M = std::function<void(Fc1Args&)>;
  const auto prep = [](const Fc1Args& a) { prepare_fc1(a); };
  for (Family f : kAllFamilies) {
    Pool pool;
    const Fc1Args ok = valid_fc1(pool, f);
    const std::string fam = family_name(f);
    Tensor wrong_dtype = Tensor::empty({kT, kH}, DType::kFP32);
    expect_rejected<Fc1Args>(ok, M([&](Fc1Args& a) { a.hidden_states = wrong_dtype; }),
                             "hidden_states", prep, fam + " dtype");
    expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.gemm1_weights = TensorView(); }),
                             "gemm1_weights", prep, fam + " missing weights");
    expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.gemm1_clamp_limit.shape[0] = kE + 1; }),
                             "gemm1_clamp_limit", prep, fam + " one limit per expert");
    expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.permuted_idx_to_token_idx.shape[0] = 3; }),
                             "permuted_idx_to_token_idx", prep, fam + " short table");
    expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.gemm1_output.shape[0] = 8; }), "gemm1_output",
                             prep, fam + " too few output rows");
    expect_rejected<Fc1Args>(ok,
                             M([](Fc1Args& a) { a.num_non_exiting_ctas.dtype = DType::kInt64; }),
                             "num_non_exiting_ctas", prep, fam + " scalar dtype");
    expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.hidden_states.device = Device::cuda(0); }),
                             "gemm1_weights", prep, fam + " device mix");
    expect_rejected<Fc1Args>(ok,
                             M([](Fc1Args& a) { a.gemm1_clamp_limit.device = Device::cuda(0); }),
                             "gemm1_clamp_limit", prep, fam + " device mix");
    expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.hidden_states.strides[0] *= 2; }),
                             "hidden_states", prep, fam + " non-contiguous");
    if (is_nvfp4(f) || f == Family::kMXFP8) {
      expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.gemm1_weights_scale.shape[0] -= 1; }),
                               "gemm1_weights_scale", prep, fam + " weight scale size");
      expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.hidden_states_scale = TensorView(); }),
                               "hidden_states_scale", prep, fam + " missing act scale");
    } else {
      expect_rejected<Fc1Args>(ok,
                               M([&](Fc1Args& a) { a.gemm1_weights_scale = ok.gemm1_clamp_limit; }),
                               "gemm1_weights_scale", prep, fam + " unexpected scale");
    }
    if (is_nvfp4(f) || f == Family::kFP8) {
      expect_rejected<Fc1Args>(ok,
                               M([](Fc1Args& a) { a.output1_scale_gate_scalar = TensorView(); }),
                               "output1_scale_gate_scalar", prep, fam + " missing scalar");
    }
    if (f == Family::kNVFP4BF16Tok) {
      expect_rejected<Fc1Args>(ok, M([](Fc1Args& a) { a.per_token_scale.shape[0] = kT - 1; }),
                               "per_token_scale", prep, fam + " short per-token scales");
    } else {
      expect_rejected<Fc1Args>(ok, M([&](Fc1Args& a) { a.per_token_scale = ok.gemm1_clamp_limit; }),
                               "per_token_scale", prep, fam + " unexpected per-token scale");
    }
  }
}

/// A valid routing argument set (FromLogits, bf16 logits) with poisoned outputs.
RoutingArgs valid_routing(Pool& pool) {
  const int64_t rows = max_padded(kT, kK, kE, kTile), ctas = max_ctas(kT, kK, kE, kTile);
  RoutingArgs a;
  a.routing_logits = pool.make({kT, kE}, DType::kBF16);
  a.topk_weights = pool.make({kT, kK}, DType::kBF16);
  a.topk_packed = pool.make({kT, kK}, DType::kInt32);
  a.expert_count_histogram = pool.make({512}, DType::kInt32);
  a.total_num_padded_tokens = pool.make({1}, DType::kInt32);
  a.expanded_idx_to_permuted_idx = pool.make({kT * kK}, DType::kInt32);
  a.permuted_idx_to_token_idx = pool.make({rows + 1}, DType::kInt32);
  a.cta_idx_xy_to_batch_idx = pool.make({ctas}, DType::kInt32);
  a.cta_idx_xy_to_mn_limit = pool.make({ctas}, DType::kInt32);
  a.num_non_exiting_ctas = pool.make({1}, DType::kInt32);
  a.num_experts = kE;
  a.top_k = kK;
  a.local_num_experts = kE;
  a.tile_tokens_dim = kTile;
  return a;
}

TEST(RoutingValidation, RejectsEachBrokenRule) {
  using M = std::function<void(RoutingArgs&)>;
  const auto prep = [](const RoutingArgs& a) { prepare_routing(a); };
  Pool pool;
  const RoutingArgs ok = valid_routing(pool);
  EXPECT_NO_THROW(prepare_routing(ok));
  Tensor ids = Tensor::empty({kT, kK}, DType::kInt32);
  expect_rejected<RoutingArgs>(ok, M([&](RoutingArgs& a) { a.topk_ids = ids; }), "routing_logits",
                               prep, "both inputs");
  expect_rejected<RoutingArgs>(ok, M([](RoutingArgs& a) { a.routing_logits.dtype = DType::kFP16; }),
                               "routing_logits", prep, "logits dtype");
  expect_rejected<RoutingArgs>(ok, M([](RoutingArgs& a) { a.top_k = kE + 1; }), "top_k", prep,
                               "K > E");
  expect_rejected<RoutingArgs>(ok, M([](RoutingArgs& a) { a.local_expert_offset = 1; }),
                               "local_num_experts", prep, "local range past E");
  expect_rejected<RoutingArgs>(ok, M([](RoutingArgs& a) { a.tile_tokens_dim = 0; }),
                               "tile_tokens_dim", prep, "tile 0");
  expect_rejected<RoutingArgs>(ok, M([](RoutingArgs& a) { a.expert_count_histogram.shape[0] = 7; }),
                               "expert_count_histogram", prep, "histogram >= 2E");
  expect_rejected<RoutingArgs>(ok, M([](RoutingArgs& a) { a.cta_idx_xy_to_mn_limit.shape[0] = 1; }),
                               "cta_idx_xy_to_mn_limit", prep, "cta table size");
  expect_rejected<RoutingArgs>(ok, M([](RoutingArgs& a) { a.topk_packed = TensorView(); }),
                               "topk_packed", prep, "logits mode writes packed");
  RoutingArgs by_ids = ok;
  by_ids.routing_logits = TensorView();
  by_ids.topk_ids = ids;
  EXPECT_NO_THROW(prepare_routing(by_ids));
  expect_rejected<RoutingArgs>(by_ids, M([](RoutingArgs& a) { a.routed_scaling_factor = 3.0; }),
                               "routed_scaling_factor", prep, "scaling with precomputed weights");
  expect_rejected<RoutingArgs>(by_ids, M([](RoutingArgs& a) { a.topk_ids.dtype = DType::kInt64; }),
                               "topk_ids", prep, "ids dtype");
}

TEST(RoutingValidation, NothingWrittenOnRejection) {
  Pool pool;
  RoutingArgs bad = valid_routing(pool);
  bad.top_k = kE + 1;
  std::vector<uint8_t> before(bad.expanded_idx_to_permuted_idx.nbytes());
  std::memcpy(before.data(), bad.expanded_idx_to_permuted_idx.data, before.size());
  EXPECT_THROW(routing(bad), InvalidArgument);
  EXPECT_EQ(std::memcmp(before.data(), bad.expanded_idx_to_permuted_idx.data, before.size()), 0);
}

TEST(FinalizeValidation, RejectsEachBrokenRule) {
  using M = std::function<void(FinalizeArgs&)>;
  const auto prep = [](const FinalizeArgs& a) { prepare_finalize(a); };
  Pool pool;
  FinalizeArgs ok;
  ok.gemm2_output = pool.make({64, kH}, DType::kBF16);
  ok.expert_weights = pool.make({kT, kK}, DType::kFP32);
  ok.expanded_idx_to_permuted_idx = pool.make({kT * kK}, DType::kInt32);
  ok.total_num_padded_tokens = pool.make({1}, DType::kInt32);
  ok.output = pool.make({kT, kH}, DType::kBF16);
  ok.num_experts = kE;
  EXPECT_NO_THROW(prepare_finalize(ok));
  expect_rejected<FinalizeArgs>(ok, M([](FinalizeArgs& a) { a.output.shape[1] = kH + 1; }),
                                "output", prep, "output width");
  expect_rejected<FinalizeArgs>(ok,
                                M([](FinalizeArgs& a) { a.expert_weights.dtype = DType::kFP16; }),
                                "expert_weights", prep, "weights dtype");
  expect_rejected<FinalizeArgs>(
      ok, M([](FinalizeArgs& a) { a.expanded_idx_to_permuted_idx.shape[0] = 3; }),
      "expanded_idx_to_permuted_idx", prep, "short e2p");
}

TEST(RequantValidation, RejectsEachBrokenRule) {
  using M = std::function<void(RequantArgs&)>;
  const auto prep = [](const RequantArgs& a) { prepare_requant(a); };
  Pool pool;
  RequantArgs ok;
  ok.gemm1_output = pool.make({64, kI}, DType::kBF16);
  ok.expanded_idx_to_permuted_idx = pool.make({kT * kK}, DType::kInt32);
  ok.output = pool.make({64, kI / 2}, DType::kUInt8);
  ok.output_scale = pool.make({formats::sf_size_r8c4(64, kI / 16)}, DType::kUInt8);
  ok.per_token_scale = pool.make({64}, DType::kFP32);
  EXPECT_NO_THROW(prepare_requant(ok));
  expect_rejected<RequantArgs>(ok, M([](RequantArgs& a) { a.gemm1_output.dtype = DType::kFP32; }),
                               "gemm1_output", prep, "input dtype");
  expect_rejected<RequantArgs>(ok, M([](RequantArgs& a) { a.output.shape[1] = kI; }), "output",
                               prep, "output width I/2");
  expect_rejected<RequantArgs>(ok, M([](RequantArgs& a) { a.per_token_scale.shape[0] = 63; }),
                               "per_token_scale", prep, "per-token rows");
  expect_rejected<RequantArgs>(ok, M([](RequantArgs& a) { a.sf_layout = SfLayout::kR128C4; }),
                               "sf_layout", prep, "r128c4 rows");
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe

namespace cakemoe {
namespace stepfun {
namespace {

/// A valid FC2 argument set built from the FC1 one (same tables and FC1 output).
Fc2Args valid_fc2(Pool& pool, const Fc1Args& f1) {
  const int64_t rows = max_padded(kT, kK, kE, kTile);
  Fc2Args a;
  a.family = f1.family;
  a.gemm2_input = f1.gemm1_output;
  a.gemm2_input_scale = f1.gemm1_output_scale;
  if (f1.family == Family::kNVFP4BF16Tok) {
    a.gemm2_input = pool.make({rows, kI / 2}, DType::kE2M1x2);
    a.gemm2_input_scale = pool.make({formats::sf_size_r8c4(rows, kI / 16)}, DType::kE4M3);
    a.per_token_scale = pool.make({rows}, DType::kFP32);
  }
  if (is_nvfp4(f1.family)) {
    a.gemm2_weights = pool.make({kE, kH, kI / 2}, DType::kE2M1x2);
    a.gemm2_weights_scale = pool.make({kE * formats::sf_size_128x4(kH, kI / 16)}, DType::kE4M3);
  } else if (f1.family == Family::kMXFP8) {
    a.gemm2_weights = pool.make({kE, kH, kI}, DType::kE4M3);
    a.gemm2_weights_scale = pool.make({kE * formats::sf_size_128x4(kH, kI / 32)}, DType::kUE8M0);
  } else if (f1.family == Family::kFP8) {
    a.gemm2_weights = pool.make({kE, kH, kI}, DType::kE4M3);
  } else {
    a.gemm2_weights = pool.make({kE, kI / 64, kH, 64}, DType::kBF16);
  }
  if (is_nvfp4(f1.family) || f1.family == Family::kFP8) {
    a.output2_scale_scalar = pool.make({kE}, DType::kFP32);
  }
  a.cta_idx_xy_to_batch_idx = f1.cta_idx_xy_to_batch_idx;
  a.cta_idx_xy_to_mn_limit = f1.cta_idx_xy_to_mn_limit;
  a.num_non_exiting_ctas = f1.num_non_exiting_ctas;
  a.gemm2_output = pool.make({rows, kH}, DType::kBF16);
  a.num_tokens = kT;
  a.top_k = kK;
  a.tile_tokens_dim = kTile;
  return a;
}

TEST(Fc2Validation, RejectsEachBrokenRule) {
  using M = std::function<void(Fc2Args&)>;
  const auto prep = [](const Fc2Args& a) { prepare_fc2(a); };
  for (Family f : kAllFamilies) {
    Pool pool;
    const Fc2Args ok = valid_fc2(pool, valid_fc1(pool, f));
    const std::string fam = family_name(f);
    EXPECT_NO_THROW(prepare_fc2(ok)) << fam;
    expect_rejected<Fc2Args>(ok, M([](Fc2Args& a) { a.gemm2_output.shape[1] = kH / 2; }),
                             "gemm2_output", prep, fam + " output width");
    expect_rejected<Fc2Args>(ok, M([](Fc2Args& a) { a.gemm2_input.shape[0] = 8; }), "gemm2_input",
                             prep, fam + " input rows");
    expect_rejected<Fc2Args>(ok, M([](Fc2Args& a) { a.num_tokens = 0; }), "num_tokens", prep,
                             fam + " T");
    expect_rejected<Fc2Args>(ok, M([](Fc2Args& a) { a.gemm2_weights.dtype = DType::kFP32; }),
                             "gemm2_weights", prep, fam + " weight dtype");
    if (is_nvfp4(f) || f == Family::kFP8) {
      expect_rejected<Fc2Args>(ok, M([](Fc2Args& a) { a.output2_scale_scalar.shape[0] = 1; }),
                               "output2_scale_scalar", prep, fam + " scalar per expert");
    }
    if (f == Family::kNVFP4BF16Tok) {
      expect_rejected<Fc2Args>(ok, M([](Fc2Args& a) { a.per_token_scale = TensorView(); }),
                               "per_token_scale", prep, fam + " per-token scales");
    }
  }
}

TEST(LayerValidation, RejectsLayerRules) {
  Pool pool;
  const Fc1Args f1 = valid_fc1(pool, Family::kBF16);
  const Fc2Args f2 = valid_fc2(pool, f1);
  MoeArgs ok;
  ok.family = Family::kBF16;
  ok.hidden_states = f1.hidden_states;
  ok.gemm1_weights = f1.gemm1_weights;
  ok.gemm1_clamp_limit = f1.gemm1_clamp_limit;
  ok.gemm2_weights = f2.gemm2_weights;
  ok.routing_logits = pool.make({kT, kE}, DType::kBF16);
  ok.num_experts = kE;
  ok.top_k = kK;
  ok.local_num_experts = kE;
  EXPECT_NO_THROW(prepare_stepfun_moe(ok));
  using M = std::function<void(MoeArgs&)>;
  const auto prep = [](const MoeArgs& a) { prepare_stepfun_moe(a); };
  Tensor ids = Tensor::empty({kT, kK}, DType::kInt32);
  expect_rejected<MoeArgs>(ok, M([&](MoeArgs& a) { a.topk_ids = ids; }), "routing_logits", prep,
                           "both routing inputs");
  expect_rejected<MoeArgs>(ok, M([](MoeArgs& a) { a.routing_logits.shape[0] = kT + 1; }),
                           "routing_logits", prep, "token count mismatch");
  expect_rejected<MoeArgs>(ok, M([](MoeArgs& a) { a.local_num_experts = kE - 1; }), "gemm1_weights",
                           prep, "weights vs local_num_experts");
  expect_rejected<MoeArgs>(ok, M([&](MoeArgs& a) { a.topk_weights = ids; }), "topk_weights", prep,
                           "weights with logits");
  expect_rejected<MoeArgs>(ok, M([](MoeArgs& a) { a.top_k = kE + 1; }), "top_k", prep, "K > E");
  MoeArgs wrong_plan = ok;
  wrong_plan.plan = Plan();
  wrong_plan.plan->family = Family::kNVFP4;
  EXPECT_THROW(prepare_stepfun_moe(wrong_plan), InvalidArgument);
  ok.do_finalize = false;
  ok.output = pool.make({kT, kH}, DType::kBF16);
  EXPECT_THROW(prepare_stepfun_moe(ok), InvalidArgument);
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
