#include "tools/run_stepfun.h"

#include <chrono>
#include <cstdio>
#include <vector>

#include "cakemoe/stepfun.h"
#include "reference/stepfun/harness.h"

namespace cakemoe {
namespace tools {
namespace ref = reference::stepfun;
using stepfun::Family;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

bool run_stepfun(const RunOptions& options) {
  std::vector<Family> families;
  if (options.family == "all") {
    families = {Family::kBF16, Family::kFP8, Family::kMXFP8, Family::kNVFP4, Family::kNVFP4BF16Tok};
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
  std::printf("\nStepFun MoE layer (public API, routing from bf16 logits, limits 7/16 mixed)\n");
  std::printf("%-14s %-46s %-6s %9s %9s  %s\n", "family", "shape", "tile", "layer_s", "setup_s",
              "check vs fp64 oracle");
  bool all_pass = true;
  for (Family family : families) {
    ref::LayerCase c = base;
    c.family = family;
    const auto t0 = std::chrono::steady_clock::now();
    const ref::LayerData data = ref::make_layer(c);  // data + prepared weights + oracle
    const double setup_s = seconds_since(t0);
    stepfun::MoeArgs args = ref::layer_args(data);
    const stepfun::StepFunMoeLaunch launch = stepfun::prepare_stepfun_moe(args);
    const auto t1 = std::chrono::steady_clock::now();
    launch.launch();
    const double layer_s = seconds_since(t1);
    const ref::LayerCheck check =
        ref::check_layer_output(data, launch.outputs()[0].ptr<uint16_t>());
    char shape[96];
    std::snprintf(shape, sizeof(shape), "T=%lld H=%lld I=%lld E=%lld K=%lld",
                  static_cast<long long>(c.num_tokens), static_cast<long long>(c.hidden),
                  static_cast<long long>(c.intermediate), static_cast<long long>(c.num_experts),
                  static_cast<long long>(c.top_k));
    std::printf("%-14s %-46s %-6d %9.3f %9.3f  %s\n", stepfun::family_name(family), shape,
                launch.plan().tile, layer_s, setup_s, check.summary().c_str());
    all_pass = all_pass && check.pass;
  }
  return all_pass;
}

}  // namespace tools
}  // namespace cakemoe
