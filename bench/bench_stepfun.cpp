// StepFun MoE layer per family on the GPU (spec §10.4 shapes: H 4096, I 1536, E 64, K 8,
// T in {8, 64, 512, 2048}, precomputed routing ids = (t*K + k) % E). Each row replays a CUDA graph
// of StepFunMoeLaunch::launch() and times it with cudaEvents (warm L2: the same buffers every
// replay). Counters: us per forward, TFLOP/s (6*T*K*H*I), the weight bytes of the active experts,
// the roofline floor max(bytes / 4.47 TB/s, flops / 773 TFLOP/s) (bench/NOTES.md) and the share
// of it reached. Without a CUDA device it says so and exits 0.
#include <cstdio>
#include <vector>

#include "core/cuda_util.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_check.h"
#include "core/parallel.h"
#include "formats/codecs.h"
#include "reference/stepfun/weights.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace stepfun {
namespace {

constexpr int64_t kH = 4096, kI = 1536, kE = 64, kK = 8;
constexpr double kHbmRead = 4.47e12;   // bytes/s, bench/NOTES.md
constexpr double kBf16Peak = 773e12;   // FLOP/s, bench/NOTES.md
constexpr float kHiddenAmax = 12.f;    // hidden = 12 * uniform(-1, 1): a fixed calibration
constexpr int kReplays = 20;           // graph replays per timed iteration
/// Deterministic uniform(-1, 1) from an index (splitmix64), cheap enough for 1.2e9 weights.
float hash_uniform(uint64_t i) {
  uint64_t z = i + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>((z >> 40) * 0x1.0p-24) * 2.f - 1.f;
}

Tensor random_bf16(const std::vector<int64_t>& shape, uint64_t seed, float scale) {
  Tensor t = Tensor::empty(shape, DType::kBF16);
  uint16_t* p = t.ptr<uint16_t>();
  const int64_t n = t.numel(), chunk = int64_t(1) << 20;
  core::parallel_for((n + chunk - 1) / chunk, [&](int64_t c) {
    for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) {
      p[i] = formats::bf16_from_float(scale * hash_uniform(seed * 0x100000000ull + i));
    }
  });
  return t;
}

Tensor to_device(const TensorView& host) {
  return host.defined() ? core::copy_to(host, Device::cuda(0)) : Tensor();
}

double a_gs_of(Family f) {
  if (f == Family::kNVFP4) return 2688.0 / kHiddenAmax;
  if (f == Family::kFP8) return 448.0 / kHiddenAmax;
  return 0.0;
}

/// Device weights of one family, prepared once from shared logical weights.
struct FamilyWeights {
  StepFunWeights view;
  double bytes_per_expert = 0;
};

const FamilyWeights& weights_of(Family f) {
  static std::map<Family, FamilyWeights> cache;
  static Tensor w1, w2;
  auto it = cache.find(f);
  if (it != cache.end()) return it->second;
  if (!w1.defined()) {
    // Variance of randn/sqrt(K) (spec §10.3) from a uniform: scale sqrt(3/K).
    w1 = random_bf16({kE, 2 * kI, kH}, 1, std::sqrt(3.f / kH));
    w2 = random_bf16({kE, kH, kI}, 2, std::sqrt(3.f / kI));
  }
  WeightPrepOptions o;
  o.family = f;
  o.step_limits = {7.f};
  o.hidden_states_scale_global = a_gs_of(f);
  const StepFunWeights host = prepare_weights(w1, w2, o);
  FamilyWeights fw;
  fw.view = host;
  for (Tensor* t : reference::stepfun::weight_tensors(&fw.view)) *t = to_device(*t);
  double bytes = 0;
  for (const Tensor* t : {&fw.view.gemm1_weights, &fw.view.gemm1_weights_scale,
                          &fw.view.gemm2_weights, &fw.view.gemm2_weights_scale}) {
    if (t->defined()) bytes += static_cast<double>(t->nbytes());
  }
  fw.bytes_per_expert = bytes / kE;
  return cache.emplace(f, fw).first->second;
}

#define BENCH_CUDA(call) CAKEMOE_CUDA_CHECK(call)

void bm_layer(benchmark::State& state, Family f, int64_t t) {
  try {
    const FamilyWeights& w = weights_of(f);
    const StepFunActivations act =
        prepare_activations(f, random_bf16({t, kH}, 100 + t, kHiddenAmax), a_gs_of(f));
    Tensor ids = Tensor::empty({t, kK}, DType::kInt32);
    Tensor rw = Tensor::empty({t, kK}, DType::kFP32);
    for (int64_t i = 0; i < t * kK; ++i) {
      ids.ptr<int32_t>()[i] = static_cast<int32_t>(i % kE);
      rw.ptr<float>()[i] = (0.5f + 0.5f * std::fabs(hash_uniform(7000 + i))) / kK;
    }
    std::vector<Tensor> keep = {to_device(act.hidden_states), to_device(act.hidden_states_scale),
                                to_device(act.per_token_scale), to_device(ids), to_device(rw)};
    MoeArgs a;
    a.family = f;
    a.hidden_states = keep[0];
    a.hidden_states_scale = keep[1];
    a.per_token_scale = keep[2];
    a.topk_ids = keep[3];
    a.topk_weights = keep[4];
    reference::stepfun::set_weight_args(&a, w.view);
    a.num_experts = kE;
    a.top_k = kK;
    a.local_num_experts = kE;
    const StepFunMoeLaunch launch = prepare_stepfun_moe(a);

    cudaStream_t stream = nullptr;
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    launch.launch(stream);  // eager warm-up (module loading) before the capture
    BENCH_CUDA(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    launch.launch(stream);
    BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t start = nullptr, stop = nullptr;
    BENCH_CUDA(cudaEventCreate(&start));
    BENCH_CUDA(cudaEventCreate(&stop));
    for (int i = 0; i < 3; ++i) BENCH_CUDA(cudaGraphLaunch(exec, stream));
    double total_s = 0;
    for (auto _ : state) {
      BENCH_CUDA(cudaEventRecord(start, stream));
      for (int r = 0; r < kReplays; ++r) BENCH_CUDA(cudaGraphLaunch(exec, stream));
      BENCH_CUDA(cudaEventRecord(stop, stream));
      BENCH_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
      const double s = ms * 1e-3 / kReplays;
      total_s += s;
      state.SetIterationTime(s);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);

    const double per_forward = total_s / static_cast<double>(state.iterations());
    const double flops = 6.0 * t * kK * kH * kI;
    const double active = static_cast<double>(std::min<int64_t>(kE, t * kK));
    const double bytes = active * w.bytes_per_expert;
    const double floor_s = std::max(bytes / kHbmRead, flops / kBf16Peak);
    state.counters["us_per_fwd"] = per_forward * 1e6;
    state.counters["TFLOPs"] = flops / per_forward * 1e-12;
    state.counters["weight_MB"] = bytes * 1e-6;
    state.counters["TBps_weights"] = bytes / per_forward * 1e-12;
    state.counters["floor_us"] = floor_s * 1e6;
    state.counters["pct_roofline"] = 100.0 * floor_s / per_forward;
    state.counters["tile"] = static_cast<double>(launch.plan().tile);
    std::printf("stepfun %-14s T=%5lld tile=%3d  %9.1f us/fwd  %7.2f TFLOP/s  %8.1f MB  "
                "floor %7.1f us  %5.1f%% of roofline\n",
                family_name(f), static_cast<long long>(t), launch.plan().tile, per_forward * 1e6,
                flops / per_forward * 1e-12, bytes * 1e-6, floor_s * 1e6,
                100.0 * floor_s / per_forward);
  } catch (const Error& e) {
    state.SkipWithError(e.what());
  }
}

void register_all() {
  for (Family f : kAllFamilies) {
    for (int64_t t : {8, 64, 512, 2048}) {
      const std::string name = std::string("stepfun_layer/") + family_name(f) + "/T" +
                               std::to_string(t);
      benchmark::RegisterBenchmark(name.c_str(), [f, t](benchmark::State& s) { bm_layer(s, f, t); })
          ->UseManualTime()
          ->Iterations(10)
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
#endif  // CAKEMOE_WITH_CUDA

int main(int argc, char** argv) {
  if (cakemoe::core::cuda_device_count() == 0) {
    std::printf("bench_stepfun: no CUDA device visible (or a build without CUDA); nothing to "
                "measure. Run it on the H200 through scripts/gpu-check.sh.\n");
    return 0;
  }
#if defined(CAKEMOE_WITH_CUDA)
  std::printf("bench_stepfun: H %lld, I %lld, E %lld, K %lld; ceilings %.2f TB/s HBM read, "
              "%.0f TFLOP/s bf16 (bench/NOTES.md); CUDA graph replay, cudaEvent timing, warm L2\n",
              static_cast<long long>(cakemoe::stepfun::kH),
              static_cast<long long>(cakemoe::stepfun::kI),
              static_cast<long long>(cakemoe::stepfun::kE),
              static_cast<long long>(cakemoe::stepfun::kK), cakemoe::stepfun::kHbmRead * 1e-12,
              cakemoe::stepfun::kBf16Peak * 1e-12);
  benchmark::Initialize(&argc, argv);
  cakemoe::stepfun::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
#else
  (void)argc;
  (void)argv;
#endif
  return 0;
}
