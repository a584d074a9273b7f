// `cakemoe bench`, StepFun part: the whole layer (routing from bf16 logits to finalize) per family
// and T through the public API. Floor = max(bytes / HBM, 6*T*K*H*I / MMA peak), bytes = the
// weights and scales of the experts the routing touches plus the activations in and out.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "formats/codecs.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/weights.h"
#include "reference/stepfun/families.h"
#include "tools/cli_bench.h"
#include "tools/run_stepfun.h"

namespace cakemoe {
namespace tools {
namespace ref = reference::stepfun;
using stepfun::Family;

namespace {

struct Geometry {
  const char* name;
  int64_t hidden, intermediate, experts, top_k;
};

// issue 27's workloads on the GPU; the `cakemoe run` sizes on the CPU engine.
constexpr Geometry kStep35 = {"step35", 4096, 1280, 288, 8};
constexpr Geometry kFlashInfer = {"fi", 4096, 1536, 64, 8};
constexpr Geometry kCpuSmall = {"cpu_small", 1024, 512, 16, 4};
constexpr float kHiddenAmax = 8.f;  // hidden ~ N(0, 1): the calibration of a_gs (8 sigma)

double a_gs_of(Family f) {
  if (f == Family::kNVFP4) return 2688.0 / kHiddenAmax;  // nvfp4_bf16tok: per-token scales
  if (f == Family::kFP8) return 448.0 / kHiddenAmax;
  return 0.0;
}

double bytes_of(std::initializer_list<const TensorView*> views) {
  double bytes = 0;
  for (const TensorView* v : views) {
    if (v->defined()) bytes += static_cast<double>(v->nbytes());
  }
  return bytes;
}

/// Experts the top-K of each logits row selects (what Renormalize routing picks, ties aside).
int64_t unique_experts(const Tensor& logits, int64_t top_k) {
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  std::vector<char> touched(experts, 0);
  std::vector<int64_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const uint16_t* row = logits.ptr<uint16_t>() + t * experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int64_t a, int64_t b) {
      return formats::bf16_to_float(row[a]) > formats::bf16_to_float(row[b]);
    });
    for (int64_t k = 0; k < top_k; ++k) touched[order[k]] = 1;
  }
  return std::count(touched.begin(), touched.end(), 1);
}

std::vector<Geometry> geometries(const BenchOptions& options) {
  if (!options.gpu) return {kCpuSmall};
  if (options.workload == "step35") return {kStep35};
  if (options.workload == "fi") return {kFlashInfer};
  return {kStep35, kFlashInfer};
}

std::vector<int64_t> token_counts(const BenchOptions& options) {
  if (!options.tokens.empty()) return options.tokens;
  if (options.gpu) return {1, 8, 64, 512, 4096, 16384};
  return {1, 8, 64};
}

BenchRow bench_row(const Geometry& g, Family family, const stepfun::StepFunWeights& weights,
                   int64_t tokens, int reps, bool gpu) {
  const Device device = gpu ? Device::cuda(0) : Device::cpu();
  const uint64_t seed = 1000 + static_cast<uint64_t>(tokens);
  const Tensor hidden = ref::normal_bf16({tokens, g.hidden}, seed, 1.f);
  const Tensor logits = ref::normal_bf16({tokens, g.experts}, seed + 1, 1.f);
  const stepfun::StepFunActivations act =
      stepfun::prepare_activations(family, hidden, a_gs_of(family));
  stepfun::MoeArgs args;
  args.family = family;
  args.hidden_states = act.hidden_states;
  args.hidden_states_scale = act.hidden_states_scale;
  args.per_token_scale = act.per_token_scale;
  args.routing_logits = logits;
  std::vector<Tensor> keep;
  if (gpu) {
    move_views({&args.hidden_states, &args.hidden_states_scale, &args.per_token_scale,
                &args.routing_logits},
               device, keep);
  }
  ref::set_weight_args(&args, weights);
  args.num_experts = g.experts;
  args.top_k = g.top_k;
  args.local_num_experts = g.experts;
  const stepfun::StepFunMoeLaunch launch = stepfun::prepare_stepfun_moe(args);

  BenchRow row;
  row.workload = g.name;
  row.family = stepfun::family_name(family);
  row.tokens = tokens;
  row.unique_experts = unique_experts(logits, g.top_k);
  row.us = median_us([&](Stream s) { launch.launch(s); }, reps, gpu, /*capture=*/true);
  const double weight_bytes =
      bytes_of({&weights.gemm1_weights.view(), &weights.gemm1_weights_scale.view(),
                &weights.gemm2_weights.view(), &weights.gemm2_weights_scale.view()});
  const double bytes = weight_bytes * row.unique_experts / g.experts +
                       bytes_of({&args.hidden_states, &args.hidden_states_scale,
                                 &args.per_token_scale, &args.routing_logits}) +
                       2.0 * tokens * g.hidden;  // bf16 output
  const double flops = 6.0 * tokens * g.top_k * g.hidden * g.intermediate;
  const double peak = family == Family::kFP8 ? kE4m3PeakFlopsPerS : kBf16PeakFlopsPerS;
  if (gpu) {
    row.floor_us = 1e6 * std::max(bytes / kStepFunHbmBytesPerS, flops / peak);
    // Hopper-only kernel units are named sm90_* (cmake/cakemoe_kernels.cmake).
    row.path = launch.plan().fc1_kernel.rfind("sm90", 0) == 0 ? "sm90" : "simt";
  } else {
    row.path = "cpu_reference";
  }
  return row;
}

}  // namespace

std::vector<BenchRow> bench_stepfun(const BenchOptions& options, int reps) {
  std::vector<Family> families;
  if (options.family == "all") {
    families.assign(std::begin(stepfun::kAllFamilies), std::end(stepfun::kAllFamilies));
  } else {
    families = {stepfun::parse_family(options.family)};
  }
  std::printf("\nStepFun layer, routing from bf16 logits to finalize (%s, median of %d)\n",
              options.gpu ? "CUDA graph replay, L2 flushed before each rep" : "CPU engine", reps);
  std::printf("%-9s %-14s %6s %11s %11s %8s %9s %7s  %s\n", "workload", "family", "T", "us",
              "floor_us", "fraction", "TFLOP/s", "experts", "path");
  std::fflush(stdout);
  std::vector<BenchRow> rows;
  for (const Geometry& g : geometries(options)) {
    progress(std::string("bench StepFun ") + g.name + ": logical bf16 weights");
    const Tensor w1 = ref::normal_bf16({g.experts, 2 * g.intermediate, g.hidden}, 1,
                                       1.f / std::sqrt(static_cast<float>(g.hidden)));
    const Tensor w2 = ref::normal_bf16({g.experts, g.hidden, g.intermediate}, 2,
                                       1.f / std::sqrt(static_cast<float>(g.intermediate)));
    for (Family family : families) {
      progress(std::string("bench StepFun ") + g.name + " " + stepfun::family_name(family) +
               ": prepared weights");
      stepfun::WeightPrepOptions prep;
      prep.family = family;
      prep.step_limits = {7.f};
      prep.hidden_states_scale_global = a_gs_of(family);
      stepfun::StepFunWeights weights = stepfun::prepare_weights(w1, w2, prep);
      if (options.gpu) {
        for (Tensor* t : ref::weight_tensors(&weights)) {
          if (t->defined()) *t = core::copy_to(*t, Device::cuda(0));
        }
      }
      for (int64_t tokens : token_counts(options)) {
        const BenchRow row = bench_row(g, family, weights, tokens, reps, options.gpu);
        const double tflops = 6.0 * tokens * g.top_k * g.hidden * g.intermediate / row.us * 1e-6;
        char floor_text[16] = "          -";
        if (row.floor_us >= 0)
          std::snprintf(floor_text, sizeof(floor_text), "%11.1f", row.floor_us);
        std::printf("%-9s %-14s %6lld %11.1f %s %8s %9.2f %7lld  %s\n", g.name, row.family.c_str(),
                    static_cast<long long>(tokens), row.us, floor_text, fraction_text(row).c_str(),
                    tflops, static_cast<long long>(row.unique_experts), row.path.c_str());
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
  }
  return rows;
}

}  // namespace tools
}  // namespace cakemoe
