#include "tools/run_stepfun.h"

#include <chrono>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace tools {
namespace ref = reference::stepfun;
using stepfun::Family;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void progress(const std::string& text) {
  static const auto start = std::chrono::steady_clock::now();
  std::fprintf(stderr, "[cakemoe] %6.1f s  %s\n", seconds_since(start), text.c_str());
  std::fflush(stderr);
}

void move_views(std::vector<TensorView*> views, Device device, std::vector<Tensor>& keep) {
  for (TensorView* v : views) {
    if (!v->defined()) continue;
    keep.push_back(core::copy_to(*v, device));
    *v = keep.back();
  }
}

bool run_stepfun(const RunOptions& options) {
  std::vector<Family> families;
  if (options.family == "all") {
    families.assign(std::begin(stepfun::kAllFamilies), std::end(stepfun::kAllFamilies));
  } else {
    families = {stepfun::parse_family(options.family)};
  }
  ref::LayerCase base;
  if (options.full) {
    base.num_tokens = 512;
    base.hidden = 4096;
    base.intermediate = 1536;
    base.num_experts = 64;
    base.top_k = 8;
  } else {
    base.num_tokens = 64;
    base.hidden = 1024;
    base.intermediate = 512;
    base.num_experts = 16;
    base.top_k = 4;
  }
  if (options.tokens > 0) base.num_tokens = options.tokens;
  base.seed = options.seed;
  base.limits = ref::LimitMode::kMixed;
  std::printf(
      "\nStepFun MoE layer on the %s (public API, routing from bf16 logits, limits 7/16 "
      "mixed)\n",
      options.gpu ? "GPU" : "CPU reference backend");
  std::printf("%-14s %-46s %-6s %9s %9s  %s\n", "family", "shape", "tile", "layer_ms", "setup_s",
              "check vs fp64 oracle");
  std::fflush(stdout);
  bool all_pass = true;
  for (Family family : families) {
    ref::LayerCase c = base;
    c.family = family;
    progress(std::string("StepFun ") + stepfun::family_name(family) +
             ": random inputs, prepared weights and the fp64 oracle");
    const auto t0 = std::chrono::steady_clock::now();
    const ref::LayerData data = ref::make_layer(c);  // data + prepared weights + oracle
    const double setup_s = seconds_since(t0);
    stepfun::MoeArgs args = ref::layer_args(data);
    std::vector<Tensor> device_copies;
    if (options.gpu) {
      move_views({&args.hidden_states, &args.hidden_states_scale, &args.per_token_scale,
                  &args.gemm1_weights, &args.gemm1_weights_scale, &args.output1_scale_scalar,
                  &args.output1_scale_gate_scalar, &args.gemm1_clamp_limit, &args.gemm2_weights,
                  &args.gemm2_weights_scale, &args.output2_scale_scalar, &args.routing_logits,
                  &args.topk_ids, &args.topk_weights},
                 Device::cuda(0), device_copies);
    }
    progress(std::string("StepFun ") + stepfun::family_name(family) + ": the layer");
    const stepfun::StepFunMoeLaunch launch = stepfun::prepare_stepfun_moe(args);
    launch.launch();  // warm-up (module load, first touch)
    if (options.gpu) core::cuda_stream_sync(nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    launch.launch();
    if (options.gpu) core::cuda_stream_sync(nullptr);
    const double layer_s = seconds_since(t1);
    const Tensor output = core::copy_to(launch.outputs()[0], Device::cpu());
    const ref::LayerCheck check = ref::check_layer_output(data, output.ptr<uint16_t>());
    char shape[96];
    std::snprintf(shape, sizeof(shape), "T=%lld H=%lld I=%lld E=%lld K=%lld",
                  static_cast<long long>(c.num_tokens), static_cast<long long>(c.hidden),
                  static_cast<long long>(c.intermediate), static_cast<long long>(c.num_experts),
                  static_cast<long long>(c.top_k));
    std::printf("%-14s %-46s %-6d %9.3f %9.3f  %s\n", stepfun::family_name(family), shape,
                launch.plan().tile, layer_s * 1e3, setup_s, check.summary().c_str());
    std::fflush(stdout);
    all_pass = all_pass && check.pass;
  }
  return all_pass;
}

}  // namespace tools
}  // namespace cakemoe
