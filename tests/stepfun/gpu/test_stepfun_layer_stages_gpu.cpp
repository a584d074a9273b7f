// Per-stage launches of the StepFun layer on the GPU (small shapes, in the sanitizer set): routing
// tables, requant and finalize bitwise equal to the CPU reference on the same inputs (spec §10.2,
// cakemoe deviation 5), the stage chain equal to the prepared layer, do_finalize=false outputs,
// and the configuration entry with device weights prepared by the host round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "cakemoe/config.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "formats/codecs.h"
#include "reference/stepfun/weights.h"
#include "testbed/gpu/gpu_testbed.h"
#include "stepfun/gpu/stepfun_gpu_case.h"
#include "reference/stepfun/families.h"
#include "stepfun/validate.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;
namespace gt = gpu_testbed;
using testbed::random_bf16;

constexpr int kIntPoison = 0x5A;  // testbed::poison's byte for integer tables
constexpr int kPoison = 0xFF;     // ... and for floating-point buffers

/// Device buffers and args of one case, chained stage by stage.
struct Chain {
  RoutingArgs r;
  Fc1Args f1;
  RequantArgs q;
  Fc2Args f2;
  FinalizeArgs fin;
};

Chain bind_chain(const MoeArgs& dev, int64_t tokens, int64_t hidden, int64_t inter, int64_t tile,
                 gt::DevicePool& pool) {
  const Family f = dev.family;
  const int64_t k = dev.top_k, e = dev.num_experts;
  const int64_t ctas = max_ctas(tokens, k, e, tile), rows = max_padded(tokens, k, e, tile);
  // NOTE: spec §9.3: FC1 writes exactly max_padded rows of the local experts.
  const int64_t fc1_rows = max_padded(tokens, k, dev.local_num_experts, tile);
  const SfLayout layout = tile <= 64 ? SfLayout::kR8C4 : SfLayout::kR128C4;
  Chain c;
  RoutingArgs& r = c.r;
  r.routing_logits = dev.routing_logits;
  r.topk_ids = dev.topk_ids;
  if (dev.routing_logits.defined()) {
    r.topk_weights = pool.filled({tokens, k}, DType::kBF16, kPoison);
    r.topk_packed = pool.filled({tokens, k}, DType::kInt32, kIntPoison);
  } else {
    r.topk_weights = dev.topk_weights;
  }
  r.expert_count_histogram = pool.filled({std::max<int64_t>(2 * e, 512)}, DType::kInt32, 0x5A);
  r.total_num_padded_tokens = pool.filled({1}, DType::kInt32, kIntPoison);
  r.expanded_idx_to_permuted_idx = pool.filled({tokens * k}, DType::kInt32, kIntPoison);
  r.permuted_idx_to_token_idx = pool.filled({rows + 1}, DType::kInt32, kIntPoison);
  r.cta_idx_xy_to_batch_idx = pool.filled({ctas}, DType::kInt32, kIntPoison);
  r.cta_idx_xy_to_mn_limit = pool.filled({ctas}, DType::kInt32, kIntPoison);
  r.num_non_exiting_ctas = pool.filled({1}, DType::kInt32, kIntPoison);
  r.num_experts = e;
  r.top_k = k;
  r.local_expert_offset = dev.local_expert_offset;
  r.local_num_experts = dev.local_num_experts;
  r.tile_tokens_dim = tile;
  r.routed_scaling_factor = dev.routed_scaling_factor;

  Fc1Args& f1 = c.f1;
  f1.family = f;
  f1.hidden_states = dev.hidden_states;
  f1.hidden_states_scale = dev.hidden_states_scale;
  f1.gemm1_weights = dev.gemm1_weights;
  f1.gemm1_weights_scale = dev.gemm1_weights_scale;
  f1.output1_scale_scalar = dev.output1_scale_scalar;
  f1.output1_scale_gate_scalar = dev.output1_scale_gate_scalar;
  f1.gemm1_clamp_limit = dev.gemm1_clamp_limit;
  f1.per_token_scale = dev.per_token_scale;
  f1.permuted_idx_to_token_idx = r.permuted_idx_to_token_idx;
  f1.cta_idx_xy_to_batch_idx = r.cta_idx_xy_to_batch_idx;
  f1.cta_idx_xy_to_mn_limit = r.cta_idx_xy_to_mn_limit;
  f1.num_non_exiting_ctas = r.num_non_exiting_ctas;
  f1.total_num_padded_tokens = r.total_num_padded_tokens;
  f1.top_k = k;
  f1.tile_tokens_dim = tile;
  if (f == Family::kNVFP4) {
    f1.gemm1_output = pool.filled({fc1_rows, inter / 2}, DType::kE2M1x2, kPoison);
    f1.gemm1_output_scale =
        pool.filled({act_scale_bytes(f, layout, fc1_rows, inter)}, DType::kE4M3, kPoison);
  } else if (f == Family::kFP8 || f == Family::kMXFP8) {
    f1.gemm1_output = pool.filled({fc1_rows, inter}, DType::kE4M3, kPoison);
    if (f == Family::kMXFP8) {
      f1.gemm1_output_scale =
          pool.filled({act_scale_bytes(f, layout, fc1_rows, inter)}, DType::kUE8M0, kPoison);
    }
  } else {
    f1.gemm1_output = pool.filled({fc1_rows, inter}, DType::kBF16, kPoison);
  }

  Fc2Args& f2 = c.f2;
  f2.family = f;
  f2.gemm2_input = f1.gemm1_output;
  f2.gemm2_input_scale = f1.gemm1_output_scale;
  if (f == Family::kNVFP4BF16Tok) {
    RequantArgs& q = c.q;
    q.gemm1_output = f1.gemm1_output;
    q.expanded_idx_to_permuted_idx = r.expanded_idx_to_permuted_idx;
    q.output = pool.filled({fc1_rows, inter / 2}, DType::kE2M1x2, kPoison);
    q.output_scale =
        pool.filled({act_scale_bytes(f, layout, fc1_rows, inter)}, DType::kE4M3, kPoison);
    q.per_token_scale = pool.filled({fc1_rows}, DType::kFP32, kPoison);
    q.sf_layout = layout;
    f2.gemm2_input = q.output;
    f2.gemm2_input_scale = q.output_scale;
    f2.per_token_scale = q.per_token_scale;
  }
  f2.gemm2_weights = dev.gemm2_weights;
  f2.gemm2_weights_scale = dev.gemm2_weights_scale;
  f2.output2_scale_scalar = dev.output2_scale_scalar;
  f2.cta_idx_xy_to_batch_idx = r.cta_idx_xy_to_batch_idx;
  f2.cta_idx_xy_to_mn_limit = r.cta_idx_xy_to_mn_limit;
  f2.num_non_exiting_ctas = r.num_non_exiting_ctas;
  f2.gemm2_output = pool.filled({rows, hidden}, DType::kBF16, kPoison);
  f2.num_tokens = tokens;
  f2.top_k = k;
  f2.tile_tokens_dim = tile;

  c.fin.gemm2_output = f2.gemm2_output;
  c.fin.expert_weights = r.topk_weights;
  c.fin.expanded_idx_to_permuted_idx = r.expanded_idx_to_permuted_idx;
  c.fin.total_num_padded_tokens = r.total_num_padded_tokens;
  c.fin.output = pool.filled({tokens, hidden}, DType::kBF16, kPoison);
  c.fin.num_experts = e;
  return c;
}

void expect_same(const TensorView& device, const TensorView& host, const std::string& name) {
  const std::string diff = gt::diff_device_host(device, host);
  EXPECT_EQ(diff, "") << name << " differs from the CPU reference";
}

ref::LayerCase small_case(Family f, int variant) {
  ref::LayerCase c;
  c.family = f;
  c.hidden = 512;
  c.num_experts = 8;
  c.top_k = 2;
  if (variant == 0) {
    c.num_tokens = 5;
    c.intermediate = 256;
  } else {
    // Large-T routing path, I with an FC2 K remainder (Step-3.5 TP4), local experts, ids + bf16.
    c.num_tokens = 300;
    c.intermediate = 320;
    c.precomputed = true;
    c.precomputed_fp32 = false;
    c.local_expert_offset = 2;
    c.local_num_experts = 4;
    c.regime = ref::RoutingRegime::kRagged;
  }
  return c;
}

class StepFunStagesSmall : public ::testing::TestWithParam<Family> {};

TEST_P(StepFunStagesSmall, StagesMatchCpuReferenceAndPreparedLayer) {
  CAKEMOE_REQUIRE_GPU();
  for (int variant = 0; variant < 2; ++variant) {
    const ref::LayerData d = ref::make_layer(small_case(GetParam(), variant));
    const std::string what = d.config.describe();
    SCOPED_TRACE(what);
    const MoeArgs host = ref::layer_args(d);
    gt::DevicePool pool;
    const MoeArgs dev = gt::device_args(host, pool);
    ProblemDesc problem;
    problem.family = d.config.family;
    problem.num_tokens = d.config.num_tokens;
    problem.top_k = d.config.top_k;
    problem.local_num_experts = host.local_num_experts;
    problem.hidden_size = d.config.hidden;
    problem.intermediate_size = d.config.intermediate;
    problem.logits_input = !d.config.precomputed;
    problem.device = Device::cuda(0);
    const int64_t tile = default_plan(problem).tile;
    const int64_t t = d.config.num_tokens, h = d.config.hidden;
    const Chain c = bind_chain(dev, t, h, d.config.intermediate, tile, pool);

    // Routing: every table bitwise (the histogram is scratch).
    routing(c.r);
    core::cuda_stream_sync(nullptr);
    const gt::HostTables cpu = gt::cpu_routing(host, tile);
    if (host.routing_logits.defined()) {
      expect_same(c.r.topk_weights, cpu.topk_weights, "topk_weights");
      expect_same(c.r.topk_packed, cpu.topk_packed, "topk_packed");
    }
    expect_same(c.r.expanded_idx_to_permuted_idx, cpu.expanded_idx_to_permuted_idx, "e2p");
    expect_same(c.r.permuted_idx_to_token_idx, cpu.permuted_idx_to_token_idx, "p2t");
    expect_same(c.r.cta_idx_xy_to_batch_idx, cpu.cta_idx_xy_to_batch_idx, "cta batch");
    expect_same(c.r.cta_idx_xy_to_mn_limit, cpu.cta_idx_xy_to_mn_limit, "cta mn_limit");
    expect_same(c.r.num_non_exiting_ctas, cpu.num_non_exiting_ctas, "num_non_exiting_ctas");
    expect_same(c.r.total_num_padded_tokens, cpu.total_num_padded_tokens, "total_padded");

    // FC1, then requant on the GPU and on the CPU from the same FC1 output.
    fc1(c.f1);
    core::cuda_stream_sync(nullptr);
    if (GetParam() == Family::kNVFP4BF16Tok) {
      requant(c.q);
      core::cuda_stream_sync(nullptr);
      RequantArgs hq = c.q;
      const Tensor in = gt::to_host(c.q.gemm1_output);
      Tensor out = Tensor::empty(c.q.output.sizes(), c.q.output.dtype);
      Tensor sf = Tensor::empty(c.q.output_scale.sizes(), c.q.output_scale.dtype);
      Tensor pts = Tensor::empty(c.q.per_token_scale.sizes(), DType::kFP32);
      for (const Tensor* x : {&out, &sf, &pts}) std::memset(x->data(), kPoison, x->nbytes());
      hq.gemm1_output = in;
      hq.expanded_idx_to_permuted_idx = cpu.expanded_idx_to_permuted_idx;
      hq.output = out;
      hq.output_scale = sf;
      hq.per_token_scale = pts;
      requant(hq);
      expect_same(c.q.output, out, "requant output");
      expect_same(c.q.output_scale, sf, "requant output_scale");
      expect_same(c.q.per_token_scale, pts, "requant per_token_scale");
    }

    // FC2, then finalize on the GPU and on the CPU from the same FC2 output.
    fc2(c.f2);
    finalize(c.fin);
    core::cuda_stream_sync(nullptr);
    FinalizeArgs hf = c.fin;
    const Tensor g2 = gt::to_host(c.fin.gemm2_output);
    Tensor out = Tensor::empty({t, h}, DType::kBF16);
    testbed::poison(out);
    hf.gemm2_output = g2;
    hf.expert_weights = host.routing_logits.defined() ? cpu.topk_weights.view() : host.topk_weights;
    hf.expanded_idx_to_permuted_idx = cpu.expanded_idx_to_permuted_idx;
    hf.total_num_padded_tokens = cpu.total_num_padded_tokens;
    hf.output = out;
    finalize(hf);
    expect_same(c.fin.output, out, "finalize output");
    const Tensor staged = gt::to_host(c.fin.output);
    const ref::LayerCheck check = ref::check_layer_output(d, staged.ptr<uint16_t>());
    EXPECT_TRUE(check.pass) << "per-stage output: " << check.summary();

    // The prepared layer: same bits as the stage chain (deterministic kernels, token-order slots).
    MoeArgs whole = dev;
    whole.output = pool.filled({t, h}, DType::kBF16, kPoison);
    prepare_stepfun_moe(whole).launch();
    core::cuda_stream_sync(nullptr);
    EXPECT_EQ(gt::diff_device_host(whole.output, staged), "")
        << "prepare_stepfun_moe output differs from the per-stage chain (nondeterministic kernel?)";

    // do_finalize = false: the tables and the gemm2 rows the tables point at.
    MoeArgs partial = dev;
    partial.do_finalize = false;
    const StepFunMoeLaunch p = prepare_stepfun_moe(partial);
    p.launch();
    core::cuda_stream_sync(nullptr);
    const std::vector<TensorView> outs = p.outputs();
    ASSERT_EQ(outs.size(), 3u);
    EXPECT_EQ(outs[0].dtype, DType::kBF16);
    EXPECT_EQ(outs[0].shape[1], h);
    expect_same(outs[1], hf.expert_weights, "do_finalize=false expert_weights");
    expect_same(outs[2], cpu.expanded_idx_to_permuted_idx, "do_finalize=false e2p");
    // ... and the same case through the CPU backend's whole layer.
    MoeArgs host_partial = host;
    host_partial.do_finalize = false;
    host_partial.plan = p.plan();  // same tile (the CPU backend ignores the kernel names)
    const std::vector<Tensor> cpu_outs = stepfun_moe(host_partial);
    ASSERT_EQ(cpu_outs.size(), 3u);
    expect_same(outs[1], cpu_outs[1], "do_finalize=false expert_weights vs CPU backend");
    expect_same(outs[2], cpu_outs[2], "do_finalize=false e2p vs CPU backend");
    const Tensor rows = gt::to_host(outs[0]);
    const int32_t* e2p = cpu.expanded_idx_to_permuted_idx.ptr<int32_t>();
    for (int64_t i = 0; i < t * d.config.top_k; ++i) {
      if (e2p[i] < 0) continue;
      ASSERT_EQ(std::memcmp(rows.ptr<uint16_t>() + e2p[i] * h, g2.ptr<uint16_t>() + e2p[i] * h,
                            h * sizeof(uint16_t)),
                0)
          << "do_finalize=false gemm2_output row " << e2p[i] << " (pair " << i << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, StepFunStagesSmall, ::testing::ValuesIn(kAllFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

/// Device preparation (host round trip) gives the host preparation's bytes on the device, and
/// run_moe on those device operands agrees with run_moe on the CPU backend.
TEST(StepFunConfigSmall, DevicePreparationAndRunMoe) {
  CAKEMOE_REQUIRE_GPU();
  constexpr int64_t kE = 8, kH = 512, kI = 256, kT = 40, kK = 2;
  testbed::Rng rng(77);
  const Tensor w1 = random_bf16({kE, 2 * kI, kH}, rng, 1.f / std::sqrt(float(kH)));
  const Tensor w2 = random_bf16({kE, kH, kI}, rng, 1.f / std::sqrt(float(kI)));
  const Tensor hidden = random_bf16({kT, kH}, rng, 12.f);
  const Tensor logits = random_bf16({kT, kE}, rng, 1.f);
  float amax = 0.f;
  for (int64_t i = 0; i < hidden.numel(); ++i) {
    amax = std::max(amax, std::fabs(formats::bf16_to_float(hidden.ptr<uint16_t>()[i])));
  }
  const Tensor w1_dev = gt::to_device(w1), w2_dev = gt::to_device(w2);
  const Tensor hidden_dev = gt::to_device(hidden), logits_dev = gt::to_device(logits);
  const std::vector<float> limits = {7.f, 16.f, 7.f, 16.f, 7.f, 16.f, 7.f, 16.f};
  for (Family f : kAllFamilies) {
    SCOPED_TRACE(family_name(f));
    MoEConfig c;
    c.routing.num_experts = kE;
    c.routing.top_k = kK;
    c.quant = quant_of(f);
    c.experts.intermediate_size = kI;
    const double a_gs = f == Family::kFP8     ? ref::kFp8GlobalMax / amax
                        : f == Family::kNVFP4 ? ref::kNvfp4GlobalMax / amax
                                              : 0.0;
    const StepFunWeights hw = prepare_weights(c, w1, w2, limits, a_gs);
    const StepFunWeights dw = prepare_weights(c, w1_dev, w2_dev, limits, a_gs);
    for (const auto& [d, hh, name] :
         {std::make_tuple(&dw.gemm1_weights, &hw.gemm1_weights, "gemm1_weights"),
          std::make_tuple(&dw.gemm1_weights_scale, &hw.gemm1_weights_scale, "gemm1_scale"),
          std::make_tuple(&dw.gemm2_weights, &hw.gemm2_weights, "gemm2_weights"),
          std::make_tuple(&dw.gemm2_weights_scale, &hw.gemm2_weights_scale, "gemm2_scale"),
          std::make_tuple(&dw.output1_scale_scalar, &hw.output1_scale_scalar, "out1"),
          std::make_tuple(&dw.output1_scale_gate_scalar, &hw.output1_scale_gate_scalar, "gate"),
          std::make_tuple(&dw.output2_scale_scalar, &hw.output2_scale_scalar, "out2"),
          std::make_tuple(&dw.gemm1_clamp_limit, &hw.gemm1_clamp_limit, "clamp")}) {
      ASSERT_EQ(d->defined(), hh->defined()) << name;
      if (!d->defined()) continue;
      EXPECT_TRUE(d->device() == Device::cuda(0)) << name;
      expect_same(*d, *hh, name);
    }
    const StepFunActivations ha = prepare_activations(c, hw, hidden);
    const StepFunActivations da = prepare_activations(c, dw, hidden_dev);
    expect_same(da.hidden_states, ha.hidden_states, "hidden_states");
    if (ha.hidden_states_scale.defined()) {
      expect_same(da.hidden_states_scale, ha.hidden_states_scale, "hidden_states_scale");
    }
    if (ha.per_token_scale.defined()) {
      expect_same(da.per_token_scale, ha.per_token_scale, "per_token_scale");
    }
    MoeInputs hin = moe_inputs(ha), din = moe_inputs(da);
    hin.routing_logits = logits;
    din.routing_logits = logits_dev;
    const std::vector<Tensor> cpu_out = run_moe(c, hw, hin);
    const std::vector<Tensor> gpu_out = run_moe(c, dw, din);
    ASSERT_EQ(gpu_out.size(), 1u);
    ASSERT_TRUE(gpu_out[0].device() == Device::cuda(0));
    const Tensor got = gt::to_host(gpu_out[0]);
    std::vector<double> a(static_cast<size_t>(got.numel())), b(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = formats::bf16_to_float(got.ptr<uint16_t>()[i]);
      b[i] = formats::bf16_to_float(cpu_out[0].ptr<uint16_t>()[i]);
    }
    const double bar = (f == Family::kNVFP4 || f == Family::kNVFP4BF16Tok) ? 2e-2 : 1e-2;
    const double err = testbed::relative_frobenius(a, b);
    EXPECT_LE(err, bar) << "GPU run_moe vs CPU run_moe, first mismatch at "
                        << testbed::first_mismatch(a, b, 0.1, 0.85);
  }
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
