// prepare_bgmv_moe validation (spec bgmv §10), fallback policy and warnings (§9), bindings (§8).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "bgmv/plan.h"
#include "bgmv/plan_impl.h"
#include "bgmv/warnings.h"
#include "cakemoe/bgmv.h"
#include "cakemoe/errors.h"
#include "core/cuda_util.h"

namespace cakemoe {
namespace bgmv {
namespace {

using bgmv_test::Case;
using bgmv_test::CaseSpec;
using bgmv_test::make_case;

// All prepare_bgmv_moe arguments as editable values.
struct Args {
  TensorView x, sorted, experts, lora, weights;
  std::vector<TensorView> a, b;
  int64_t num_experts = 0;
  BgmvOptions options;

  explicit Args(Case& c)
      : x(c.x_view()),
        sorted(c.sorted_view()),
        experts(c.experts_view()),
        lora(c.lora_view()),
        weights(c.weights_view()),
        a(c.a_views()),
        b(c.b_views()),
        num_experts(c.spec.experts) {}
  BgmvPlan prepare() const {
    return prepare_bgmv_moe(x, a, b, sorted, experts, lora, weights, num_experts, options);
  }
};

template <typename Error>
void expect_error(const Args& args, const std::string& argument, const std::string& fragment) {
  try {
    args.prepare();
    FAIL() << "expected an error naming " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.rule()).find(fragment), std::string::npos) << e.what();
  } catch (const cakemoe::Error& e) {
    FAIL() << "wrong error type: " << e.what();
  }
}

Case small_case(uint64_t seed = 3) {
  CaseSpec spec;
  spec.tokens = 4;
  spec.hidden = 256;
  spec.rank = 16;
  spec.seed = seed;
  return make_case(spec);
}

TEST(BgmvPrepareValidation, RulesOneToSix) {
  Case c = small_case();
  Args ok(c);
  EXPECT_NO_THROW(ok.prepare());
  for (const char* backend : {"blackwell", "cuda", ""}) {
    Args bad(c);
    bad.options.backend = backend;
    bad.x = TensorView();  // a later rule is broken too: rule 1 wins
    expect_error<InvalidArgument>(bad, "backend", "only supports backend='cake'");
  }
  {
    Args bad(c);
    bad.x = TensorView();
    expect_error<InvalidArgument>(bad, "x", "required");
  }
  {
    Args bad(c);
    bad.a.clear();
    expect_error<InvalidArgument>(bad, "lora_a_weights", "at least one");
  }
  {
    Args bad(c);
    bad.b.push_back(bad.b[0]);
    expect_error<InvalidArgument>(bad, "lora_b_weights", "one tensor per slice");
  }
  {
    Args bad(c);
    bad.x = TensorView(c.x.data(), DType::kBF16, {1, 4, 256});
    expect_error<InvalidArgument>(bad, "x", "2 dimensions");
  }
  {
    Args bad(c);
    bad.a[0] = TensorView(c.lora_a[0].data(), DType::kBF16, {2 * 8, 16, 256});
    expect_error<InvalidArgument>(bad, "lora_a_weights[0]", "4 dimensions");
  }
  {
    Args bad(c);
    bad.b[0].dtype = DType::kFP16;
    expect_error<InvalidArgument>(bad, "lora_b_weights[0]", "share one dtype");
  }
  {
    // fp32 x always raises, fallback or not.
    std::vector<float> xf(4 * 256, 1.0f);
    Args bad(c);
    bad.x = TensorView(xf.data(), DType::kFP32, {4, 256});
    expect_error<InvalidArgument>(bad, "x", "BF16 or FP16");
    bad.a[0].dtype = DType::kFP32;
    bad.b[0].dtype = DType::kFP32;
    expect_error<InvalidArgument>(bad, "lora_a_weights", "BF16 or FP16");
  }
  {
    Args bad(c);
    bad.x.dtype = DType::kFP16;
    expect_error<InvalidArgument>(bad, "x", "share one dtype");
  }
}

TEST(BgmvPrepareValidation, RulesSevenToNine) {
  Case c = small_case();
  {
    Args bad(c);
    bad.num_experts = 0;
    expect_error<InvalidArgument>(bad, "num_experts", "positive");
  }
  {
    Args bad(c);
    bad.b[0].shape[0] = 3;
    expect_error<InvalidArgument>(bad, "lora_b_weights[0]", "num_loras");
  }
  {
    Args bad(c);
    bad.num_experts = 4;  // every LoRA tensor agrees on 8 experts: num_experts is the wrong one
    expect_error<InvalidArgument>(bad, "num_experts", "num_experts=4");
  }
  {
    Args bad(c);
    bad.x = TensorView(c.x.data(), DType::kBF16, {8, 128});
    bad.lora = TensorView(c.lora_indices.data(), DType::kInt64, {8});
    expect_error<InvalidArgument>(bad, "lora_a_weights[0]", "(rank, hidden_size)");
  }
  {
    Args bad(c);
    bad.b[0] = TensorView(c.lora_b[0].data(), DType::kBF16, {2, 8, 512, 8});
    expect_error<InvalidArgument>(bad, "lora_b_weights[0]", "rank=16");
  }
  {
    // Rule 8: two slices with different feat_out.
    std::vector<uint16_t> b1(2 * 8 * 128 * 16, 0);
    Args bad(c);
    bad.a.push_back(bad.a[0]);
    bad.b.push_back(TensorView(b1.data(), DType::kBF16, {2, 8, 128, 16}));
    expect_error<InvalidArgument>(bad, "lora_b_weights[1]", "same feat_out");
  }
  {
    Args bad(c);
    bad.sorted = TensorView(c.sorted_token_ids.data(), DType::kInt64, {2, 4});
    expect_error<InvalidArgument>(bad, "sorted_token_ids", "1-D and non-empty");
    bad.sorted = TensorView(c.sorted_token_ids.data(), DType::kInt64, {0});
    expect_error<InvalidArgument>(bad, "sorted_token_ids", "1-D and non-empty");
  }
  {
    Args bad(c);
    bad.experts = TensorView(c.expert_ids.data(), DType::kInt64, {7});
    expect_error<InvalidArgument>(bad, "expert_ids", "shape");
  }
  {
    Args bad(c);
    bad.weights = TensorView(c.topk_weights.data(), DType::kFP32, {7});
    expect_error<InvalidArgument>(bad, "topk_weights", "shape");
  }
  {
    Args bad(c);
    bad.lora = TensorView(c.lora_indices.data(), DType::kInt64, {3});
    expect_error<InvalidArgument>(bad, "lora_indices", "shape");
  }
  {
    Args bad(c);
    bad.weights.dtype = DType::kBF16;
    expect_error<InvalidArgument>(bad, "topk_weights", "fp32");
  }
}

TEST(BgmvPrepareValidation, RulesTenToTwelve) {
  Case c = small_case();
  {
    Args bad(c);
    bad.weights.device = Device::cuda(0);
    expect_error<InvalidArgument>(bad, "topk_weights", "cpu");
  }
  {
    Args bad(c);
    bad.a[0].strides[3] = 2;  // strided rows
    bad.a[0].strides[2] = 512;
    expect_error<InvalidArgument>(bad, "lora_a_weights[0]", "contiguous");
  }
  {
    std::vector<int32_t> ids32(c.sorted_token_ids.begin(), c.sorted_token_ids.end());
    Args bad(c);
    bad.sorted = TensorView(ids32.data(), DType::kInt32, {c.num_pairs()});
    expect_error<InvalidArgument>(bad, "sorted_token_ids", "int64");
  }
  {
    Case d = small_case();
    d.expert_ids[3] = d.spec.experts;
    Args bad(d);
    expect_error<InvalidArgument>(bad, "expert_ids", "[0, num_experts=8)");
    d.expert_ids[3] = -1;
    expect_error<InvalidArgument>(bad, "expert_ids", "got -1");
  }
  {
    Case d = small_case();
    d.lora_indices[2] = d.spec.loras;
    Args bad(d);
    expect_error<InvalidArgument>(bad, "lora_indices", "[-1, num_loras=2)");
    d.lora_indices[2] = -2;
    expect_error<InvalidArgument>(bad, "lora_indices", "got -2");
  }
  {
    // Token ids are not validated: out-of-range ids are padding.
    Case d = small_case();
    d.sorted_token_ids[1] = 1000;
    d.sorted_token_ids[2] = -7;
    Args ok(d);
    EXPECT_NO_THROW(ok.prepare());
  }
}

TEST(BgmvPrepareValidation, WorkspacesAndPipelines) {
  Case c = small_case();
  const int64_t p = c.num_pairs();
  std::vector<uint16_t> so(p * 16);
  std::vector<float> y(4 * 320, 0.0f);
  {
    Args bad(c);
    bad.options.shrink_out = TensorView(so.data(), DType::kBF16, {1, p, 8});
    expect_error<InvalidArgument>(bad, "shrink_out", "shape");
    bad.options.shrink_out = TensorView(so.data(), DType::kFP16, {1, p, 16});
    expect_error<InvalidArgument>(bad, "shrink_out", "bf16");
  }
  {
    Args bad(c);
    bad.options.y_accum = TensorView(y.data(), DType::kFP32, {4, 255});
    expect_error<InvalidArgument>(bad, "y_accum", "shape");
    bad.options.y_accum = TensorView(y.data(), DType::kBF16, {4, 256});
    expect_error<InvalidArgument>(bad, "y_accum", "fp32");
    bad.options.y_accum = TensorView(y.data(), DType::kFP32, {4, 256}, {1, 4});  // transposed
    expect_error<InvalidArgument>(bad, "y_accum", "last dimension");
    bad.options.y_accum = TensorView(y.data(), DType::kFP32, {4, 256}, {100, 1});
    expect_error<InvalidArgument>(bad, "y_accum", "row stride of at least its width");
    bad.options.y_accum = TensorView(y.data(), DType::kFP32, {4, 256}, {320, 1});
    EXPECT_NO_THROW(bad.prepare());  // a column slice is fine on the Cake-eligible path
  }
  {
    // The portable path needs a fully contiguous y_accum.
    CaseSpec spec;
    spec.tokens = 4;
    spec.hidden = 256;
    spec.rank = 12;
    Case d = make_case(spec);
    Args bad(d);
    bad.options.y_accum = TensorView(y.data(), DType::kFP32, {4, 256}, {320, 1});
    expect_error<InvalidArgument>(bad, "y_accum", "portable");
  }
  {
    Args bad(c);
    bad.options.grouped = true;
    bad.options.order_remap = true;
    expect_error<InvalidArgument>(bad, "order_remap", "grouped");
  }
  {
    // order_remap forced while the heuristic picks the grouped pipeline.
    CaseSpec spec;
    spec.tokens = 1024;
    spec.hidden = 256;
    spec.rank = 64;
    spec.loras = 1;
    spec.experts = 8;
    Case d = make_case(spec);
    Args bad(d);
    EXPECT_TRUE(bad.prepare().grouped());
    bad.options.order_remap = true;
    expect_error<InvalidArgument>(bad, "order_remap", "grouped");
  }
}

TEST(BgmvPrepareFallback, StrictModeRaisesTheReason) {
  struct Strict {
    CaseSpec spec;
    std::string argument;
    std::string reason;
  };
  std::vector<Strict> cases(4);
  cases[0].spec.rank = 12;
  cases[0].argument = "lora_a_weights";
  cases[0].reason = "Cake BGMV MoE requires LoRA rank in (8, 16, 32, 64), got 12";
  cases[1].spec.hidden = 2052;
  cases[1].argument = "x";
  cases[1].reason = "Cake BGMV MoE hidden_size must be a positive multiple of 8, got 2052";
  cases[2].spec.slices = 2;
  cases[2].argument = "lora_a_weights";
  cases[2].reason = "Cake BGMV MoE requires exactly one LoRA slice, got 2";
  cases[3].spec.feat_out = 128;
  cases[3].spec.hidden = 256;
  cases[3].argument = "lora_b_weights";
  cases[3].reason =
      "Cake BGMV MoE requires LoRA-B feat_out == hidden_size, got feat_out=128 for "
      "hidden_size=256";
  for (Strict& s : cases) {
    s.spec.tokens = 3;
    Case c = make_case(s.spec);
    Args args(c);
    args.options.fallback = false;
    try {
      args.prepare();
      FAIL() << "expected Unsupported: " << s.reason;
    } catch (const Unsupported& e) {
      EXPECT_EQ(e.argument(), s.argument);
      EXPECT_EQ(e.rule(), s.reason);
    }
    args.options.fallback = true;
    const BgmvPlan plan = args.prepare();
    EXPECT_EQ(plan.variant(), "portable");
    EXPECT_EQ(plan.fallback_reason(), s.reason);
  }
}

TEST(BgmvPrepareFallback, WarnsOncePerReasonThroughTheHook) {
  std::vector<std::string> messages;
  detail::reset_warned_reasons();
  const WarningHook previous =
      set_warning_hook([&](const std::string& m) { messages.push_back(m); });
  CaseSpec two;
  two.tokens = 4;
  two.hidden = 256;
  two.slices = 2;
  Case c2 = make_case(two);
  CaseSpec r12 = two;
  r12.slices = 1;
  r12.rank = 12;
  Case c12 = make_case(r12);
  Args(c2).prepare();
  Args(c2).prepare();
  Args(c12).prepare();
  Args(c12).prepare();
  Args(c2).prepare();
  Case cake = small_case();
  Args(cake).prepare();  // inside the support set: no warning
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0], fallback_warning("Cake BGMV MoE requires exactly one LoRA slice, got 2"));
  EXPECT_EQ(messages[1],
            fallback_warning("Cake BGMV MoE requires LoRA rank in (8, 16, 32, 64), got 12"));
  // set_warning_hook returns the hook it replaces; an empty hook means the stderr default.
  const WarningHook mine = set_warning_hook(previous);
  EXPECT_TRUE(static_cast<bool>(mine));
  EXPECT_FALSE(static_cast<bool>(previous));
}

TEST(BgmvPrepareDevice, CudaTensorsValidateThenReportTheMissingDevice) {
  if (core::cuda_device_count() > 0) {
    GTEST_SKIP() << "a CUDA device is visible: tests/gpu/test_bgmv_plan_gpu.cpp covers it";
  }
  Case c = small_case();
  Args args(c);
  const auto to_cuda = [](TensorView& v) { v.device = Device::cuda(0); };
  to_cuda(args.x);
  to_cuda(args.sorted);
  to_cuda(args.experts);
  to_cuda(args.lora);
  to_cuda(args.weights);
  for (auto& v : args.a) to_cuda(v);
  for (auto& v : args.b) to_cuda(v);
  c.expert_ids[0] = 99;  // no device: index contents are never read
  expect_error<Unsupported>(args, "device", "CUDA device(s) are visible");
  Args bad = args;
  bad.weights.device = Device::cpu();
  expect_error<InvalidArgument>(bad, "topk_weights", "cuda:0");
  // Rules 1-11 come first; the missing device is reported before the Cake support set.
  bad = args;
  bad.options.fallback = false;
  bad.b[0] = TensorView(c.lora_b[0].data(), DType::kBF16, {2, 8, 128, 16}, Device::cuda(0));
  expect_error<Unsupported>(bad, "device", "the portable fallback also requires CUDA tensors");
}

TEST(BgmvPrepareBindings, RunRefusesRebinding) {
  Case c = small_case();
  Args args(c);
  const std::shared_ptr<BgmvPlan::Impl> impl =
      detail::prepare_impl(args.x, args.a, args.b, args.sorted, args.experts, args.lora,
                           args.weights, args.num_experts, args.options);
  BgmvPlan plan(impl);
  EXPECT_NO_THROW(plan.run());
  std::vector<uint16_t> other(c.x);
  impl->update_binding("x", TensorView(other.data(), DType::kBF16, {4, 256}));
  try {
    plan.run();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "x");
    EXPECT_EQ(e.rule(), "tensor storage, shape or stride changed after preparation");
  }
  impl->update_binding("x", args.x);
  EXPECT_NO_THROW(plan.run());
  TensorView reshaped = args.weights;
  reshaped.strides[0] = 2;
  impl->update_binding("topk_weights", reshaped);
  EXPECT_THROW(plan.run(), InvalidArgument);
  EXPECT_THROW(impl->update_binding("nope", args.x), InvalidArgument);
  BgmvPlan empty;
  EXPECT_THROW(empty.run(), InvalidArgument);
}

// The grouped forms a test or bench may force (PlanOverrides): out-of-range values are refused
// naming the field; accepted ones are what the plan reports (and what the CUDA setup copies).
TEST(BgmvPrepare, GroupedOverridesAreCheckedAndReported) {
  Case c = small_case();
  Args args(c);
  args.options.grouped = true;
  const auto prepare = [&](const PlanOverrides& overrides) {
    return detail::prepare_impl(args.x, args.a, args.b, args.sorted, args.experts, args.lora,
                                args.weights, args.num_experts, args.options, overrides);
  };
  const auto refused = [&](const PlanOverrides& overrides, const std::string& argument) {
    try {
      prepare(overrides);
      ADD_FAILURE() << "expected InvalidArgument(" << argument << ")";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument);
    }
  };
  PlanOverrides bad_stage;
  bad_stage.grouped_stage = 3;
  refused(bad_stage, "grouped_stage");
  PlanOverrides bad_pdl;
  bad_pdl.launch_pdl_mode = 3;
  refused(bad_pdl, "launch_pdl_mode");
  const GroupedGeometry picked = prepare({})->choice.geometry;
  EXPECT_TRUE(picked.fused_index);          // a few pairs: the one-CTA index
  EXPECT_TRUE(picked.packed_routes);        // P <= 65536, T <= 32768
  EXPECT_TRUE(picked.discard_partials);     // H 256 % 32 == 0
  EXPECT_FALSE(picked.tensor_core_expand);  // rank 16: SIMT
  PlanOverrides forced;
  forced.grouped_stage = 0;
  forced.fused_index = false;
  forced.packed_routes = false;
  forced.launch_pdl_mode = 0;
  const std::shared_ptr<BgmvPlan::Impl> impl = prepare(forced);
  EXPECT_EQ(impl->choice.geometry.stage, 0);
  EXPECT_FALSE(impl->choice.geometry.fused_index);
  EXPECT_FALSE(impl->choice.geometry.packed_routes);
  EXPECT_EQ(impl->choice.launch_pdl_mode, 0);
}

}  // namespace
}  // namespace bgmv
}  // namespace cakemoe
