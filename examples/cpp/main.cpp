// Run: cmake --install <cakemoe build> --prefix /tmp/cakemoe, then
//   cmake -S examples/cpp -B build-example -DCMAKE_PREFIX_PATH=/tmp/cakemoe
//   cmake --build build-example && build-example/cakemoe_example   (exit 0: every check passed)
//
// A consumer of the installed package (find_package(cakemoe CONFIG), target cakemoe::cakemoe)
// that uses only the public headers. It runs both pipelines on the CPU engine and, when the
// library was built with CUDA and a device is visible, on CUDA device 0 too:
//   1. a StepFun MoE layer (router outside: precomputed top-k ids and weights) through the unified
//      MoEConfig entry, bf16 and nvfp4 weights, checked against a float model of the layer;
//   2. a BGMV MoE-LoRA plan, checked against a float model of shrink + expand.
#include <cakemoe/bgmv.h>
#include <cakemoe/config.h>
#include <cakemoe/errors.h>
#include <cakemoe/stepfun.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

using cakemoe::Device;
using cakemoe::DeviceType;
using cakemoe::DType;
using cakemoe::Tensor;
using cakemoe::TensorView;
namespace stepfun = cakemoe::stepfun;

namespace {

float from_bf16(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t to_bf16(float f) {  // round to nearest even (no NaN inputs here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

Tensor random_bf16(const std::vector<int64_t>& shape, float scale, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape, DType::kBF16);
  std::normal_distribution<float> normal(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<uint16_t>()[i] = to_bf16(normal(rng));
  return t;
}

/// A contiguous copy of the contiguous view `t` on `device` (cudaMemcpy in CUDA builds).
Tensor copy_to(const TensorView& t, Device device) {
  Tensor out = Tensor::empty(t.sizes(), t.dtype, device);
  const bool on_host = device.type == DeviceType::kCPU && t.device.type == DeviceType::kCPU;
  if (on_host) std::memcpy(out.data(), t.data, t.nbytes());
#if defined(CAKEMOE_WITH_CUDA)
  if (!on_host && cudaMemcpy(out.data(), t.data, t.nbytes(), cudaMemcpyDefault) != cudaSuccess) {
    throw cakemoe::CudaError("cudaMemcpy", "copy failed");
  }
#endif
  return out;
}

int cuda_devices() {
  int count = 0;
#if defined(CAKEMOE_WITH_CUDA)
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
#endif
  return count;
}

void synchronize(Device device) {
#if defined(CAKEMOE_WITH_CUDA)
  if (device.type == DeviceType::kCUDA) cudaDeviceSynchronize();
#endif
  (void)device;
}

/// Relative Frobenius distance of two float vectors.
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += double(got[i] - want[i]) * (got[i] - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

std::vector<float> to_floats(const Tensor& host_bf16_or_fp32) {
  std::vector<float> v(host_bf16_or_fp32.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = host_bf16_or_fp32.dtype() == DType::kFP32
               ? host_bf16_or_fp32.ptr<float>()[i]
               : from_bf16(host_bf16_or_fp32.ptr<uint16_t>()[i]);
  }
  return v;
}

bool report(const char* what, const char* against, double error, double bar) {
  const bool pass = error <= bar;  // false for NaN
  std::printf("  %-30s vs %-12s rel_error=%.3e (bar %.0e) %s\n", what, against, error, bar,
              pass ? "PASS" : "FAIL");
  return pass;
}

// ---- StepFun layer ------------------------------------------------------------------------------
constexpr int64_t kT = 16, kH = 512, kI = 256, kE = 8, kK = 2;
constexpr float kLimit = 7.f;

struct LayerData {
  Tensor hidden, w1, w2, ids, weights;  // bf16 [T,H], [E,2I,H], [E,H,I]; int32 / fp32 [T,K]
};

LayerData make_layer_data() {
  std::mt19937 rng(7);
  LayerData d{random_bf16({kT, kH}, 1.f, rng),
              random_bf16({kE, 2 * kI, kH}, 1.f / std::sqrt(kH), rng),
              random_bf16({kE, kH, kI}, 1.f / std::sqrt(kI), rng),
              Tensor::empty({kT, kK}, DType::kInt32), Tensor::empty({kT, kK}, DType::kFP32)};
  for (int64_t t = 0; t < kT; ++t) {  // the router runs outside: distinct ids, weights sum to 1
    for (int64_t k = 0; k < kK; ++k) {
      d.ids.ptr<int32_t>()[t * kK + k] = static_cast<int32_t>((t + 3 * k) % kE);
      d.weights.ptr<float>()[t * kK + k] = k == 0 ? 0.7f : 0.3f;
    }
  }
  return d;
}

/// out[t] = sum_k w[t,k] * W2_e * SwiGLUStep(W1_e x_t), rows of W1 = [up; gate], in float.
std::vector<float> layer_model(const LayerData& d) {
  const std::vector<float> x = to_floats(d.hidden), w1 = to_floats(d.w1), w2 = to_floats(d.w2);
  std::vector<float> out(kT * kH, 0.f), act(kI);
  for (int64_t t = 0; t < kT; ++t) {
    for (int64_t k = 0; k < kK; ++k) {
      const int64_t e = d.ids.ptr<int32_t>()[t * kK + k];
      for (int64_t i = 0; i < kI; ++i) {
        float up = 0, gate = 0;
        for (int64_t h = 0; h < kH; ++h) {
          up += w1[(e * 2 * kI + i) * kH + h] * x[t * kH + h];
          gate += w1[(e * 2 * kI + kI + i) * kH + h] * x[t * kH + h];
        }
        const float silu = gate / (1.f + std::exp(-gate));
        act[i] = std::min(silu, kLimit) * std::clamp(up, -kLimit, kLimit);
      }
      for (int64_t h = 0; h < kH; ++h) {
        float acc = 0;
        for (int64_t i = 0; i < kI; ++i) acc += w2[(e * kH + h) * kI + i] * act[i];
        out[t * kH + h] += d.weights.ptr<float>()[t * kK + k] * acc;
      }
    }
  }
  return out;
}

/// One layer through the unified entry on `device`; returns the bf16 output as floats.
std::vector<float> run_layer(const LayerData& host, stepfun::QuantConfig quant, Device device) {
  stepfun::MoEConfig config;
  config.routing.num_experts = kE;
  config.routing.top_k = kK;
  config.quant = quant;
  config.experts.intermediate_size = kI;
  config.activation = stepfun::swiglu_step(kLimit);
  config.routing_input = stepfun::RoutingInputMode::kUnpackedPrecomputed;
  float amax = 0;  // nvfp4 / fp8 need the activations' global scale, calibrated here on the data
  for (float v : to_floats(host.hidden)) amax = std::max(amax, std::fabs(v));
  const double a_gs = quant.weights == stepfun::QuantFormat::kNVFP4 ? 448.0 * 6.0 / amax : 0.0;

  // Prepared once per model load: the family's weight layout on the device.
  const Tensor w1 = copy_to(host.w1, device), w2 = copy_to(host.w2, device);
  const stepfun::StepFunWeights weights = stepfun::prepare_weights(config, w1, w2, {}, a_gs);
  // Per forward: quantized activations and the router's ids / weights.
  const Tensor hidden = copy_to(host.hidden, device);
  const Tensor ids = copy_to(host.ids, device), topk_weights = copy_to(host.weights, device);
  const stepfun::StepFunActivations act = stepfun::prepare_activations(config, weights, hidden);
  stepfun::MoeInputs inputs = stepfun::moe_inputs(act);
  inputs.topk_ids = ids;
  inputs.topk_weights = topk_weights;
  const stepfun::StepFunMoeLaunch launch = stepfun::prepare_moe(config, weights, inputs);
  launch.launch();  // allocates nothing, never syncs: capturable in a CUDA graph
  synchronize(device);
  return to_floats(copy_to(launch.outputs()[0], Device::cpu()));
}

// ---- BGMV MoE-LoRA ------------------------------------------------------------------------------
constexpr int64_t kLoraT = 12, kLoraH = 256, kRank = 16, kLoras = 3, kLoraE = 8, kLoraK = 2;

struct LoraData {
  Tensor x, a, b;  // bf16 [T,H], [L,E,R,H], [L,E,H,R]
  Tensor sorted_token_ids, expert_ids, topk_weights, lora_indices;  // [P], [P], [P], [T]
};

LoraData make_lora_data() {
  std::mt19937 rng(11);
  const int64_t pairs = kLoraT * kLoraK;
  LoraData d{random_bf16({kLoraT, kLoraH}, 1.f, rng),
             random_bf16({kLoras, kLoraE, kRank, kLoraH}, 0.5f / std::sqrt(kLoraH), rng),
             random_bf16({kLoras, kLoraE, kLoraH, kRank}, 2.f / std::sqrt(kRank), rng),
             Tensor::empty({pairs}, DType::kInt64),
             Tensor::empty({pairs}, DType::kInt64),
             Tensor::empty({pairs}, DType::kFP32),
             Tensor::empty({kLoraT}, DType::kInt64)};
  for (int64_t t = 0; t < kLoraT; ++t) {  // token-major top-k routes; token 0 has no LoRA
    d.lora_indices.ptr<int64_t>()[t] = t == 0 ? -1 : t % kLoras;
    for (int64_t k = 0; k < kLoraK; ++k) {
      d.sorted_token_ids.ptr<int64_t>()[t * kLoraK + k] = t;
      d.expert_ids.ptr<int64_t>()[t * kLoraK + k] = (2 * t + k) % kLoraE;
      d.topk_weights.ptr<float>()[t * kLoraK + k] = k == 0 ? 0.6f : 0.4f;
    }
  }
  return d;
}

/// y[t] = sum over the routes of t of w * B[l,e] (A[l,e] x_t), zero for tokens without a LoRA.
std::vector<float> lora_model(const LoraData& d) {
  const std::vector<float> x = to_floats(d.x), a = to_floats(d.a), b = to_floats(d.b);
  std::vector<float> y(kLoraT * kLoraH, 0.f), row(kRank);
  for (int64_t p = 0; p < kLoraT * kLoraK; ++p) {
    const int64_t t = d.sorted_token_ids.ptr<int64_t>()[p], e = d.expert_ids.ptr<int64_t>()[p];
    const int64_t l = d.lora_indices.ptr<int64_t>()[t];
    if (l < 0) continue;
    const int64_t bin = l * kLoraE + e;
    for (int64_t r = 0; r < kRank; ++r) {
      float acc = 0;
      for (int64_t h = 0; h < kLoraH; ++h)
        acc += a[(bin * kRank + r) * kLoraH + h] * x[t * kLoraH + h];
      row[r] = acc;
    }
    for (int64_t h = 0; h < kLoraH; ++h) {
      float acc = 0;
      for (int64_t r = 0; r < kRank; ++r) acc += b[(bin * kLoraH + h) * kRank + r] * row[r];
      y[t * kLoraH + h] += d.topk_weights.ptr<float>()[p] * acc;
    }
  }
  return y;
}

std::vector<float> run_lora(const LoraData& host, Device device) {
  const Tensor x = copy_to(host.x, device), a = copy_to(host.a, device),
               b = copy_to(host.b, device);
  const Tensor sorted = copy_to(host.sorted_token_ids, device);
  const Tensor experts = copy_to(host.expert_ids, device);
  const Tensor weights = copy_to(host.topk_weights, device);
  const Tensor loras = copy_to(host.lora_indices, device);
  // The plan owns y_accum [T, F] fp32 and the shrink rows; run() allocates nothing.
  cakemoe::bgmv::BgmvPlan plan =
      cakemoe::bgmv::prepare_bgmv_moe(x, {a}, {b}, sorted, experts, loras, weights, kLoraE);
  const TensorView y = plan.run();
  synchronize(device);
  std::printf("  BGMV plan: backend %s, variant %s\n", plan.backend_used().c_str(),
              plan.variant().c_str());
  return to_floats(copy_to(y, Device::cpu()));
}

}  // namespace

int main() {
  try {
    const LayerData layer = make_layer_data();
    const LoraData lora = make_lora_data();
    struct Check {
      const char* name;
      std::vector<float> model;  // the float model of the computation
      double bar;                // the largest relative error against it that passes
      std::function<std::vector<float>(Device)> run;
    };
    // bf16 weights round the FC1 output to bf16 only; nvfp4 quantizes x, W1, the FC1 output and
    // W2 to 4 bits, hence its wide bar against the unquantized model (0.23 measured here).
    std::vector<Check> checks = {
        {"StepFun layer, bf16 weights", layer_model(layer), 2e-2,
         [&](Device d) { return run_layer(layer, stepfun::QuantConfig::bf16(), d); }},
        {"StepFun layer, nvfp4 weights", layer_model(layer), 3e-1,
         [&](Device d) { return run_layer(layer, stepfun::QuantConfig::nvfp4(), d); }},
        {"BGMV MoE-LoRA y", lora_model(lora), 1e-2, [&](Device d) { return run_lora(lora, d); }},
    };
    std::vector<Device> devices = {Device::cpu()};
    if (cuda_devices() > 0) devices.push_back(Device::cuda(0));
    std::vector<std::vector<float>> cpu_results(checks.size());
    bool pass = true;
    for (Device device : devices) {
      const bool cpu = device.type == DeviceType::kCPU;
      std::printf("%s:\n", cpu ? "CPU engine" : "CUDA device 0");
      for (size_t i = 0; i < checks.size(); ++i) {
        const Check& c = checks[i];
        const std::vector<float> got = c.run(device);
        pass &= report(c.name, "float model", rel_error(got, c.model), c.bar);
        if (cpu) {
          cpu_results[i] = got;
        } else {  // the GPU kernels against the CPU engine: same format, same roundings
          pass &= report(c.name, "CPU engine", rel_error(got, cpu_results[i]), 1e-2);
        }
      }
    }
    if (devices.size() == 1) std::printf("(no CUDA device, or a build without CUDA: CPU only)\n");
    std::printf("%s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
  } catch (const cakemoe::Error& e) {  // every library error names the argument and the rule
    std::fprintf(stderr, "cakemoe error: %s\n", e.what());
    return 1;
  }
}
