#include "tools/run_bgmv.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cakemoe/bgmv.h"
#include "core/cuda_util.h"
#include "formats/codecs.h"
#include "reference/bgmv/bgmv.h"

namespace cakemoe {
namespace tools {
namespace ref = reference::bgmv;

namespace {

struct Case {
  int64_t tokens = 64, hidden = 3072, rank = 32, loras = 4, experts = 64, top_k = 2;
};

void fill_bf16(Tensor& t, std::mt19937_64& engine, float scale) {
  std::normal_distribution<float> normal(0.f, 1.f);
  uint16_t* p = t.ptr<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = formats::bf16_from_float(normal(engine) * scale);
}

}  // namespace

std::string YCheck::summary() const {
  char text[160];
  std::snprintf(text, sizeof(text), "rel_frob=%.3e%s max_abs=%.3e within(1e-2,1e-2)=%.2f%% %s",
                rel_frob, reference_is_zero ? " (zero reference)" : "", max_abs,
                100.0 * fraction_within, pass ? "PASS" : "FAIL");
  return text;
}

YCheck check_y(const float* y, int64_t row_stride, const double* oracle, int64_t rows,
               int64_t cols) {
  double num = 0, den = 0;
  int64_t within = 0;
  YCheck check;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t col = 0; col < cols; ++col) {
      const double got = y[t * row_stride + col], want = oracle[t * cols + col];
      const double err = std::fabs(got - want);
      num += (got - want) * (got - want);
      den += want * want;
      // NaN sticks in max_abs (std::max keeps its first argument when a comparison is false).
      check.max_abs = std::isnan(err) ? err : std::max(check.max_abs, err);
      if (err <= 1e-2 + 1e-2 * std::fabs(want)) ++within;  // false for NaN
    }
  }
  check.reference_is_zero = den == 0;
  if (check.reference_is_zero) {
    check.rel_frob = num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  } else {
    check.rel_frob = std::sqrt(num / den);
  }
  const int64_t count = rows * cols;
  check.fraction_within = count > 0 ? static_cast<double>(within) / count : 1.0;
  // NaN compares false: a NaN anywhere fails both conditions.
  check.pass = within == count && check.rel_frob <= 1e-2;
  return check;
}

bool run_bgmv(const RunOptions& options) {
  Case c;
  if (options.tokens > 0) c.tokens = options.tokens;
  const int64_t pairs = c.tokens * c.top_k;
  std::mt19937_64 engine(options.seed);
  // Data of spec bgmv §11.2: x ~ N(0,1), A ~ 0.5/sqrt(H) N(0,1), B ~ 2/sqrt(R) N(0,1).
  Tensor x = Tensor::empty({c.tokens, c.hidden}, DType::kBF16);
  Tensor a = Tensor::empty({c.loras, c.experts, c.rank, c.hidden}, DType::kBF16);
  Tensor b = Tensor::empty({c.loras, c.experts, c.hidden, c.rank}, DType::kBF16);
  fill_bf16(x, engine, 1.f);
  fill_bf16(a, engine, 0.5f / std::sqrt(float(c.hidden)));
  fill_bf16(b, engine, 2.f / std::sqrt(float(c.rank)));
  Tensor sorted = Tensor::empty({pairs}, DType::kInt64);
  Tensor experts = Tensor::empty({pairs}, DType::kInt64);
  Tensor weights = Tensor::empty({pairs}, DType::kFP32);
  Tensor loras = Tensor::empty({c.tokens}, DType::kInt64);
  std::vector<int64_t> ids(c.experts);
  std::iota(ids.begin(), ids.end(), 0);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::shuffle(ids.begin(), ids.end(), engine);  // top-k distinct experts, softmax weights
    std::vector<float> logit(c.top_k);
    for (float& l : logit) l = normal(engine);
    const float m = *std::max_element(logit.begin(), logit.end());
    float sum = 0;
    for (float& l : logit) sum += (l = std::exp(l - m));
    for (int64_t k = 0; k < c.top_k; ++k) {
      sorted.ptr<int64_t>()[t * c.top_k + k] = t;
      experts.ptr<int64_t>()[t * c.top_k + k] = ids[k];
      weights.ptr<float>()[t * c.top_k + k] = logit[k] / sum;
    }
    // Token 0 takes the no-LoRA path (exact zeros) unless it is the only token.
    const bool no_lora = t == 0 && c.tokens > 1;
    loras.ptr<int64_t>()[t] = no_lora ? -1 : static_cast<int64_t>(engine() % c.loras);
  }

  TensorView xv = x, av = a, bv = b, sv = sorted, ev = experts, lv = loras, wv = weights;
  std::vector<Tensor> device_copies;
  if (options.gpu) move_views({&xv, &av, &bv, &sv, &ev, &lv, &wv}, Device::cuda(0), device_copies);
  bgmv::BgmvPlan plan = bgmv::prepare_bgmv_moe(xv, {av}, {bv}, sv, ev, lv, wv, c.experts);
  plan.run();  // first run: graph capture on the GPU
  if (options.gpu) core::cuda_stream_sync(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  plan.run();
  if (options.gpu) core::cuda_stream_sync(nullptr);
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Tensor y_host = core::copy_to(plan.y_accum(), Device::cpu());
  const TensorView y = y_host;

  ref::Problem p;
  p.dtype = DType::kBF16;
  p.num_tokens = c.tokens;
  p.hidden = c.hidden;
  p.rank = c.rank;
  p.feat_out = c.hidden;
  p.num_pairs = pairs;
  p.num_loras = c.loras;
  p.num_experts = c.experts;
  p.x = x.ptr<uint16_t>();
  p.lora_a = {a.ptr<uint16_t>()};
  p.lora_b = {b.ptr<uint16_t>()};
  p.sorted_token_ids = sorted.ptr<int64_t>();
  p.expert_ids = experts.ptr<int64_t>();
  p.lora_indices = loras.ptr<int64_t>();
  p.topk_weights = weights.ptr<float>();
  progress("BGMV: the fp64 oracle");
  const std::vector<double> oracle = ref::oracle_y(p, /*round_shrink=*/false);
  const YCheck check = check_y(y.ptr<float>(), y.stride(0), oracle.data(), c.tokens, c.hidden);
  const auto launch = plan.shrink_launch();
  std::printf(
      "\nBGMV MoE-LoRA plan on the %s (public API, bf16, token-major top-%lld pairs, "
      "LoRA -1 on token 0 when T > 1)\n",
      options.gpu ? "GPU" : "CPU reference backend", static_cast<long long>(c.top_k));
  std::printf(
      "shape T=%lld H=%lld R=%lld L=%lld E=%lld P=%lld | backend=%s variant=%s "
      "shrink=(%s, splits %d) grouped=%d mma=%d remap=%d pdl=%d\n",
      static_cast<long long>(c.tokens), static_cast<long long>(c.hidden),
      static_cast<long long>(c.rank), static_cast<long long>(c.loras),
      static_cast<long long>(c.experts), static_cast<long long>(pairs), plan.backend_used().c_str(),
      plan.variant().c_str(), launch ? bgmv::shrink_kind_name(launch->kind) : "none",
      launch ? launch->splits : -1, plan.grouped(), plan.grouped_mma(), plan.order_remap(),
      plan.pdl_mode());
  std::printf("run %.3f ms (host clock, one run) | vs fp64 oracle: %s\n", run_s * 1e3,
              check.summary().c_str());
  return check.pass;
}

}  // namespace tools
}  // namespace cakemoe
