// Prepared StepFun layers under concurrency and in-place input changes (spec §9.2: a launch owns
// every intermediate buffer, reads its inputs when it runs, and can be captured). Two layers of
// different families and shapes launched on two streams from one thread, and prepared + launched
// from two host threads, give the bytes each gives alone; a captured launch() replayed after its
// inputs were overwritten in place gives the bytes of an eager launch on the new inputs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"
#include "formats/codecs.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/families.h"
#include "stepfun/gpu/stepfun_gpu_case.h"
#include "testbed/gpu/gpu_testbed.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;
namespace gt = gpu_testbed;

constexpr int kRounds = 4;  // launches per layer and stream (or thread)

/// Layer 0: logits routing on the large-T path; layer 1: precomputed bf16 routing, few tokens,
/// local experts, an FC2 K remainder (I 320). Different families, shapes and inputs.
ref::LayerCase concurrency_case(Family family, int which) {
  ref::LayerCase c;
  c.family = family;
  c.hidden = 512;
  if (which == 0) {
    c.num_tokens = 300;
    c.intermediate = 256;
    c.num_experts = 16;
    c.top_k = 4;
    c.regime = ref::RoutingRegime::kRandperm;
  } else {
    c.num_tokens = 40;
    c.intermediate = 320;
    c.num_experts = 8;
    c.top_k = 2;
    c.precomputed = true;
    c.precomputed_fp32 = false;
    c.local_expert_offset = 2;
    c.local_num_experts = 4;
    c.regime = ref::RoutingRegime::kRagged;
    c.seed = 77;
  }
  return c;
}

/// One prepared layer with its own stream, and its outputs when it runs alone on that stream.
struct SoloLayer {
  ref::LayerData data;
  gt::DevicePool pool;
  MoeArgs dev;
  StepFunMoeLaunch launch;
  cudaStream_t stream = nullptr;
  std::vector<Tensor> alone;  ///< host copies

  explicit SoloLayer(const ref::LayerCase& c) : data(ref::make_layer(c)) {
    dev = gt::device_args(ref::layer_args(data), pool);
    launch = prepare_stepfun_moe(dev);
    CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gt::poison_outputs(launch, stream);
    launch.launch(stream);
    gt::sync_or_exit(stream, "alone: " + data.config.describe());
    alone = gt::host_outputs(launch);
  }
  ~SoloLayer() { cudaStreamDestroy(stream); }
  SoloLayer(const SoloLayer&) = delete;
  SoloLayer& operator=(const SoloLayer&) = delete;

  /// "" when `outputs` (host copies) hold the bytes of the run alone, else the first difference.
  std::string diff_from_alone(const std::vector<Tensor>& outputs) const {
    if (outputs.size() != alone.size()) return "output count differs";
    for (size_t i = 0; i < alone.size(); ++i) {
      const std::string d = gt::diff_bytes(outputs[i].data(), alone[i].data(), alone[i].nbytes(),
                                           dtype_size(alone[i].dtype()));
      if (!d.empty()) return "output " + std::to_string(i) + ": " + d;
    }
    return "";
  }
};

/// Both layers, each checked once against the fp64 oracle (so equal bytes cannot mean "both
/// left the poison").
std::pair<std::unique_ptr<SoloLayer>, std::unique_ptr<SoloLayer>> make_pair_of_layers(
    std::pair<Family, Family> families) {
  auto a = std::make_unique<SoloLayer>(concurrency_case(families.first, 0));
  auto b = std::make_unique<SoloLayer>(concurrency_case(families.second, 1));
  for (const SoloLayer* l : {a.get(), b.get()}) {
    const ref::LayerCheck check = ref::check_layer_output(l->data, l->alone[0].ptr<uint16_t>());
    EXPECT_TRUE(check.pass) << l->data.config.describe() << " alone: " << check.summary();
  }
  return {std::move(a), std::move(b)};
}

using FamilyPair = std::pair<Family, Family>;

class StepFunConcurrency : public ::testing::TestWithParam<FamilyPair> {};

TEST_P(StepFunConcurrency, TwoStreamsGiveTheBytesOfEachLayerAlone) {
  CAKEMOE_REQUIRE_GPU();
  auto [a, b] = make_pair_of_layers(GetParam());
  SoloLayer* layers[] = {a.get(), b.get()};
  // Device snapshots of every round's outputs, allocated before any launch: [layer][round][out].
  std::vector<std::vector<std::vector<Tensor>>> snaps(2);
  for (int l = 0; l < 2; ++l) {
    snaps[l].resize(kRounds);
    for (auto& round : snaps[l]) {
      for (const TensorView& v : layers[l]->launch.outputs()) {
        round.push_back(Tensor::empty(v.sizes(), v.dtype, Device::cuda(0)));
      }
    }
  }
  // Rounds interleaved across the streams, nothing waits in between: the launches overlap.
  for (int r = 0; r < kRounds; ++r) {
    for (int l = 0; l < 2; ++l) {
      SoloLayer& layer = *layers[l];
      gt::poison_outputs(layer.launch, layer.stream);
      layer.launch.launch(layer.stream);
      const std::vector<TensorView> outs = layer.launch.outputs();
      for (size_t o = 0; o < outs.size(); ++o) {
        core::copy_tensor(snaps[l][r][o], outs[o], layer.stream);
      }
    }
  }
  for (SoloLayer* layer : layers) {
    gt::sync_or_exit(layer->stream, "concurrent: " + layer->data.config.describe());
  }
  for (int l = 0; l < 2; ++l) {
    for (int r = 0; r < kRounds; ++r) {
      std::vector<Tensor> host;
      for (const Tensor& s : snaps[l][r]) host.push_back(gt::to_host(s));
      EXPECT_EQ(layers[l]->diff_from_alone(host), "")
          << layers[l]->data.config.describe() << ", round " << r << " on two streams";
    }
  }
}

TEST_P(StepFunConcurrency, TwoHostThreadsGiveTheBytesOfEachLayerAlone) {
  CAKEMOE_REQUIRE_GPU();
  auto [a, b] = make_pair_of_layers(GetParam());
  // Each thread prepares its own launch (prepare runs concurrently too) and launches it on its
  // layer's stream; failures are collected as text and reported on the test thread.
  const auto body = [](const SoloLayer* layer, std::string* error) {
    try {
      const StepFunMoeLaunch mine = prepare_stepfun_moe(layer->dev);
      for (int r = 0; r < kRounds && error->empty(); ++r) {
        gt::poison_outputs(mine, layer->stream);
        mine.launch(layer->stream);
        gt::sync_or_exit(layer->stream, "thread: " + layer->data.config.describe());
        const std::string d = layer->diff_from_alone(gt::host_outputs(mine));
        if (!d.empty()) *error = "round " + std::to_string(r) + ", " + d;
      }
    } catch (const std::exception& e) {
      *error = std::string("threw: ") + e.what();
    }
  };
  std::string errors[2];
  std::thread ta(body, a.get(), &errors[0]);
  std::thread tb(body, b.get(), &errors[1]);
  ta.join();
  tb.join();
  EXPECT_EQ(errors[0], "") << a->data.config.describe() << " from thread 1";
  EXPECT_EQ(errors[1], "") << b->data.config.describe() << " from thread 2";
}

INSTANTIATE_TEST_SUITE_P(FamilyPairs, StepFunConcurrency,
                         ::testing::Values(FamilyPair{Family::kBF16, Family::kNVFP4},
                                           FamilyPair{Family::kFP8, Family::kNVFP4BF16Tok},
                                           FamilyPair{Family::kMXFP8, Family::kBF16}),
                         [](const ::testing::TestParamInfo<FamilyPair>& info) {
                           return std::string(family_name(info.param.first)) + "_" +
                                  family_name(info.param.second);
                         });

// ---- Graph replay after the inputs change in place -----------------------------------------

/// Overwrites every per-token input of `dev` in place on `stream` with new random contents:
/// hidden states (quantized with the weights' a_gs), logits, or precomputed ids shifted by one
/// expert (still distinct per token) with new weights. Returns when the copies are done.
void overwrite_inputs(const ref::LayerData& d, const MoeArgs& dev, uint64_t seed,
                      cudaStream_t stream) {
  const int64_t t = d.config.num_tokens, k = d.config.top_k, e = d.config.num_experts;
  const Tensor hidden = ref::normal_bf16({t, d.config.hidden}, seed, 12.f);
  const StepFunActivations act =
      prepare_activations(d.config.family, hidden, d.weights.view.hidden_states_scale_global);
  core::copy_tensor(dev.hidden_states, act.hidden_states, stream);
  if (act.hidden_states_scale.defined()) {
    core::copy_tensor(dev.hidden_states_scale, act.hidden_states_scale, stream);
  }
  if (act.per_token_scale.defined()) {
    core::copy_tensor(dev.per_token_scale, act.per_token_scale, stream);
  }
  Tensor logits, ids, weights;
  if (!d.config.precomputed) {
    logits = ref::normal_bf16({t, e}, seed + 1, 1.f);
    core::copy_tensor(dev.routing_logits, logits, stream);
  } else {
    ids = Tensor::empty({t, k}, DType::kInt32);
    weights = Tensor::empty({t, k}, d.topk_weights.dtype());
    testbed::Rng rng(seed + 2);
    for (int64_t i = 0; i < t * k; ++i) {
      ids.ptr<int32_t>()[i] = static_cast<int32_t>((d.topk_ids.ptr<int32_t>()[i] + 1) % e);
      const float w = rng.uniform(0.05f, 1.f);
      if (weights.dtype() == DType::kFP32) {
        weights.ptr<float>()[i] = w;
      } else {
        weights.ptr<uint16_t>()[i] = formats::bf16_from_float(w);
      }
    }
    core::copy_tensor(dev.topk_ids, ids, stream);
    core::copy_tensor(dev.topk_weights, weights, stream);
  }
  gt::sync_or_exit(stream, "input copies");  // the host sources go out of scope here
}

class StepFunGraphInPlace : public ::testing::TestWithParam<Family> {};

TEST_P(StepFunGraphInPlace, ReplayAfterInputsChangeEqualsEagerLaunchBitwise) {
  CAKEMOE_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (bool precomputed : {false, true}) {
    ref::LayerCase c;
    c.family = GetParam();
    c.num_tokens = precomputed ? 7 : 300;  // both routing paths
    c.hidden = 512;
    c.intermediate = 256;
    c.num_experts = 16;
    c.top_k = 4;
    c.precomputed = precomputed;
    c.regime = ref::RoutingRegime::kRandperm;
    const ref::LayerData d = ref::make_layer(c);
    SCOPED_TRACE(d.config.describe());
    gt::DevicePool pool;
    const MoeArgs dev = gt::device_args(ref::layer_args(d), pool);
    const StepFunMoeLaunch launch = prepare_stepfun_moe(dev);
    const auto run_eager = [&](const StepFunMoeLaunch& l) {
      gt::poison_outputs(l, stream);
      l.launch(stream);
      gt::sync_or_exit(stream, "eager launch");
      return gt::host_outputs(l);
    };
    const std::vector<Tensor> before = run_eager(launch);
    const ref::LayerCheck check = ref::check_layer_output(d, before[0].ptr<uint16_t>());
    EXPECT_TRUE(check.pass) << "eager launch on the first inputs: " << check.summary();

    // Capture once, on the first inputs.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    launch.launch(stream);
    CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    // New contents through the same pointers, then the replay.
    overwrite_inputs(d, dev, d.config.seed + 1000, stream);
    gt::poison_outputs(launch, stream);
    CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    gt::sync_or_exit(stream, "graph replay");
    const std::vector<Tensor> replayed = gt::host_outputs(launch);

    // References on the new inputs: the same launch eagerly, and a launch prepared afresh.
    const std::vector<Tensor> eager = run_eager(launch);
    const std::vector<Tensor> fresh = run_eager(prepare_stepfun_moe(dev));
    ASSERT_EQ(replayed.size(), 1u);
    const size_t bytes = eager[0].nbytes();
    EXPECT_EQ(gt::diff_bytes(replayed[0].data(), eager[0].data(), bytes, 2), "")
        << "replay after the in-place change vs an eager launch on the new inputs";
    EXPECT_EQ(gt::diff_bytes(fresh[0].data(), eager[0].data(), bytes, 2), "")
        << "a launch prepared on the new inputs vs the first launch run eagerly on them";
    EXPECT_NE(gt::diff_bytes(eager[0].data(), before[0].data(), bytes, 2), "")
        << "the new inputs left the output unchanged: the test would not see a stale replay";
    CAKEMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    CAKEMOE_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  CAKEMOE_CUDA_CHECK(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, StepFunGraphInPlace, ::testing::ValuesIn(kAllFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
