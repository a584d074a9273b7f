// `cakemoe bench`, BGMV part: one MoE-LoRA plan per T through the public API (plan.run(), which
// replays the plan's own CUDA graph on the GPU). Floor = bytes_min of spec bgmv §14 / HBM: x,
// the A and B rows of every touched (LoRA, expert) bin once, y, the indices and the shrink rows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cakemoe/bgmv.h"
#include "core/cuda_util.h"
#include "reference/stepfun/harness.h"
#include "tools/cli_bench.h"
#include "tools/run_stepfun.h"

namespace cakemoe {
namespace tools {

namespace {

struct Shape {
  const char* name;
  int64_t hidden, rank, top_k, loras, experts;
};

// The spec bgmv §13 benchmark defaults (8 LoRAs, rank 32, 128 experts, top-2) on the GPU; the
// `cakemoe run` plan on the CPU engine.
constexpr Shape kGpuShape = {"bgmv_h3072_r32_k2_l8_e128", 3072, 32, 2, 8, 128};
constexpr Shape kCpuShape = {"bgmv_h3072_r32_k2_l4_e64", 3072, 32, 2, 4, 64};

struct Routes {
  Tensor sorted, experts, weights, loras;
  int64_t bins = 0;  ///< distinct (LoRA, expert) pairs of tokens with a LoRA
};

/// Token-major top-k routes of distinct experts, uniform weights 1/k, a LoRA per token.
Routes make_routes(const Shape& s, int64_t tokens, uint64_t seed) {
  const int64_t pairs = tokens * s.top_k;
  Routes r{Tensor::empty({pairs}, DType::kInt64), Tensor::empty({pairs}, DType::kInt64),
           Tensor::empty({pairs}, DType::kFP32), Tensor::empty({tokens}, DType::kInt64)};
  std::mt19937_64 engine(seed);
  std::vector<int64_t> ids(s.experts);
  std::iota(ids.begin(), ids.end(), 0);
  std::set<std::pair<int64_t, int64_t>> bins;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t lora = static_cast<int64_t>(engine() % s.loras);
    r.loras.ptr<int64_t>()[t] = lora;
    std::shuffle(ids.begin(), ids.end(), engine);
    for (int64_t k = 0; k < s.top_k; ++k) {
      r.sorted.ptr<int64_t>()[t * s.top_k + k] = t;
      r.experts.ptr<int64_t>()[t * s.top_k + k] = ids[k];
      r.weights.ptr<float>()[t * s.top_k + k] = 1.f / s.top_k;
      bins.insert({lora, ids[k]});
    }
  }
  r.bins = static_cast<int64_t>(bins.size());
  return r;
}

/// spec bgmv §14 bytes_min for bf16 with `bins` touched bins.
double bytes_min(const Shape& s, int64_t tokens, int64_t bins) {
  const double b = 2, p = static_cast<double>(tokens * s.top_k);
  return b * s.hidden * (tokens + 2.0 * bins * s.rank) + 4.0 * tokens * s.hidden + p * (8 + 8 + 4) +
         tokens * 8.0 + 2.0 * p * s.rank * b;
}

}  // namespace

std::vector<BenchRow> bench_bgmv(const BenchOptions& options, int reps) {
  const Shape& s = options.gpu ? kGpuShape : kCpuShape;
  std::vector<int64_t> token_counts = options.tokens;
  if (token_counts.empty()) {
    token_counts =
        options.gpu ? std::vector<int64_t>{1, 8, 64, 512, 2048} : std::vector<int64_t>{1, 8, 64};
  }
  std::printf(
      "\nBGMV MoE-LoRA plan, bf16, H %lld R %lld top-%lld, %lld LoRAs x %lld experts "
      "(%s, median of %d)\n",
      static_cast<long long>(s.hidden), static_cast<long long>(s.rank),
      static_cast<long long>(s.top_k), static_cast<long long>(s.loras),
      static_cast<long long>(s.experts),
      options.gpu ? "plan.run() graph replay, L2 flushed before each rep" : "CPU engine", reps);
  std::printf("%6s %11s %11s %8s %8s %7s  %s\n", "T", "us", "floor_us", "fraction", "GB/s", "bins",
              "path");
  std::fflush(stdout);
  progress("bench BGMV: LoRA weights");
  const Device device = options.gpu ? Device::cuda(0) : Device::cpu();
  auto place = [&](const Tensor& host) { return options.gpu ? core::copy_to(host, device) : host; };
  const Tensor a = place(reference::stepfun::normal_bf16({s.loras, s.experts, s.rank, s.hidden}, 11,
                                                         0.5f / std::sqrt(float(s.hidden))));
  const Tensor b = place(reference::stepfun::normal_bf16({s.loras, s.experts, s.hidden, s.rank}, 12,
                                                         2.f / std::sqrt(float(s.rank))));
  std::vector<BenchRow> rows;
  for (int64_t tokens : token_counts) {
    const Routes r = make_routes(s, tokens, 100 + static_cast<uint64_t>(tokens));
    const Tensor x = place(reference::stepfun::normal_bf16({tokens, s.hidden}, 13, 1.f));
    const Tensor sorted = place(r.sorted), experts = place(r.experts);
    const Tensor weights = place(r.weights), loras = place(r.loras);
    bgmv::BgmvPlan plan =
        bgmv::prepare_bgmv_moe(x, {a}, {b}, sorted, experts, loras, weights, s.experts);
    BenchRow row;
    row.workload = s.name;
    row.family = "bgmv";
    row.tokens = tokens;
    row.unique_experts = r.bins;
    row.path = plan.backend_used();
    row.us = median_us([&](Stream st) { plan.run(st); }, reps, options.gpu, /*capture=*/false);
    const double bytes = bytes_min(s, tokens, r.bins);
    if (options.gpu) row.floor_us = 1e6 * bytes / kBgmvHbmBytesPerS;
    char floor_text[16] = "          -";
    if (row.floor_us >= 0) std::snprintf(floor_text, sizeof(floor_text), "%11.2f", row.floor_us);
    std::printf("%6lld %11.2f %s %8s %8.1f %7lld  %s\n", static_cast<long long>(tokens), row.us,
                floor_text, fraction_text(row).c_str(), bytes / row.us * 1e-3,
                static_cast<long long>(r.bins), row.path.c_str());
    std::fflush(stdout);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace tools
}  // namespace cakemoe
