#include "reference/stepfun/harness.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "core/parallel.h"
#include "formats/codecs.h"
#include "reference/stepfun/activations.h"
#include "reference/stepfun/oracle.h"
#include "reference/stepfun/routing.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

float bf16_amax(const uint16_t* x, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(formats::bf16_to_float(x[i])));
  return amax;
}

std::vector<float> step_limits(const LayerCase& c, int64_t e_loc) {
  std::vector<float> limits(e_loc);
  for (int64_t e = 0; e < e_loc; ++e) {
    const int64_t global = c.local_expert_offset + e;
    limits[e] = c.limits == LimitMode::k7    ? 7.f
                : c.limits == LimitMode::k16 ? 16.f
                                             : (global % 2 == 0 ? 7.f : 16.f);
  }
  return limits;
}

/// Logits of spec §10.3's regimes (bf16 [T, E]).
Tensor make_logits(const LayerCase& c, std::mt19937_64& engine) {
  const int64_t t_count = c.num_tokens, e_count = c.num_experts;
  Tensor logits = Tensor::empty({t_count, e_count}, DType::kBF16);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<int64_t> row_of(t_count);
  std::iota(row_of.begin(), row_of.end(), 0);
  if (c.regime == RoutingRegime::kRandperm) std::shuffle(row_of.begin(), row_of.end(), engine);
  for (int64_t t = 0; t < t_count; ++t) {
    const double pos = static_cast<double>(t) * e_count / t_count;
    const double center = std::floor(pos * pos / e_count);
    for (int64_t e = 0; e < e_count; ++e) {
      float v = normal(engine);
      if (c.regime != RoutingRegime::kUniform)
        v -= 0.25f * static_cast<float>(std::fabs(e - center));
      logits.ptr<uint16_t>()[row_of[t] * e_count + e] = formats::bf16_from_float(v);
    }
  }
  return logits;
}

}  // namespace

const char* limit_mode_name(LimitMode mode) {
  return mode == LimitMode::k7 ? "7" : mode == LimitMode::k16 ? "16" : "mixed";
}

const char* routing_regime_name(RoutingRegime regime) {
  return regime == RoutingRegime::kUniform  ? "uniform"
         : regime == RoutingRegime::kRagged ? "ragged"
                                            : "randperm";
}

std::string LayerCase::describe() const {
  std::ostringstream os;
  os << cakemoe::stepfun::family_name(family) << " T=" << num_tokens << " H=" << hidden
     << " I=" << intermediate << " E=" << num_experts << " K=" << top_k
     << " limits=" << limit_mode_name(limits) << " routing=" << routing_regime_name(regime)
     << (precomputed ? (precomputed_fp32 ? " ids+fp32" : " ids+bf16") : " logits");
  if (local_num_experts >= 0)
    os << " local=[" << local_expert_offset << "+" << local_num_experts << "]";
  return os.str();
}

Tensor normal_bf16(const std::vector<int64_t>& shape, uint64_t seed, float scale) {
  constexpr int64_t kChunk = int64_t(1) << 18;
  Tensor t = Tensor::empty(shape, DType::kBF16);
  uint16_t* out = t.ptr<uint16_t>();
  const int64_t n = t.numel();
  core::parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) {
    std::mt19937_64 engine(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(c));
    std::normal_distribution<float> normal(0.f, 1.f);
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      out[i] = formats::bf16_from_float(normal(engine) * scale);
    }
  });
  return t;
}

LayerData make_layer(const LayerCase& c) {
  LayerData d;
  d.config = c;
  const int64_t t = c.num_tokens, h = c.hidden, inter = c.intermediate, e = c.num_experts;
  const int64_t e_loc = c.local_num_experts < 0 ? e : c.local_num_experts;
  std::mt19937_64 engine(c.seed);

  // Logical bf16 operands (spec §10.3).
  const Tensor hidden = normal_bf16({t, h}, c.seed + 1, 12.f);
  const Tensor w1 = normal_bf16({e, 2 * inter, h}, c.seed + 2, 1.f / std::sqrt(float(h)));
  const Tensor w2 = normal_bf16({e, h, inter}, c.seed + 3, 1.f / std::sqrt(float(inter)));
  d.routing_logits = make_logits(c, engine);

  // Routing the oracle follows: the Renormalize router's ids and weights.
  RoutingConfig rc;
  rc.num_tokens = t;
  rc.top_k = c.top_k;
  rc.num_experts = e;
  rc.local_expert_offset = c.local_expert_offset;
  rc.local_num_experts = e_loc;
  rc.routed_scaling_factor = c.routed_scaling_factor;
  const TopK topk = route_from_logits(rc, d.routing_logits.data(), DType::kBF16);
  d.oracle_ids = topk.ids;
  d.oracle_weights.resize(topk.weights.size());
  if (c.precomputed) {
    // Caller-side weights: positive, normalised per token, stored in the requested dtype.
    std::uniform_real_distribution<float> uniform(0.1f, 1.f);
    d.topk_ids = Tensor::empty({t, c.top_k}, DType::kInt32);
    std::copy(topk.ids.begin(), topk.ids.end(), d.topk_ids.ptr<int32_t>());
    d.topk_weights = Tensor::empty({t, c.top_k}, c.precomputed_fp32 ? DType::kFP32 : DType::kBF16);
    for (int64_t tok = 0; tok < t; ++tok) {
      std::vector<float> w(c.top_k);
      for (float& x : w) x = uniform(engine);
      const float sum = std::accumulate(w.begin(), w.end(), 0.f);
      for (int64_t k = 0; k < c.top_k; ++k) {
        const int64_t i = tok * c.top_k + k;
        float v = w[k] / sum;
        if (c.precomputed_fp32) {
          d.topk_weights.ptr<float>()[i] = v;
        } else {
          d.topk_weights.ptr<uint16_t>()[i] = formats::bf16_from_float(v);
          v = formats::bf16_to_float(d.topk_weights.ptr<uint16_t>()[i]);
        }
        d.oracle_weights[i] = v;
      }
    }
  } else {
    for (size_t i = 0; i < topk.weights.size(); ++i) {
      d.oracle_weights[i] = formats::bf16_to_float(topk.weights[i]);
    }
  }

  // Weights and activations of the family; c_gs calibrated on the oracle's activation.
  const bool nvfp4 = is_nvfp4_family(c.family);
  const float amax = bf16_amax(hidden.ptr<uint16_t>(), hidden.numel());
  double a_gs = 0;
  if (nvfp4) a_gs = kNvfp4GlobalMax / amax;
  if (c.family == Family::kFP8) a_gs = kFp8GlobalMax / amax;
  WeightPrepOptions options;
  options.family = c.family;
  options.step_limits = step_limits(c, e_loc);
  options.local_expert_offset = c.local_expert_offset;
  options.local_num_experts = e_loc;
  options.hidden_states_scale_global = a_gs;
  d.weights = reference::stepfun::prepare_weights(w1, w2, options);
  d.activations = reference::stepfun::prepare_activations(c.family, hidden, a_gs);
  OracleProblem problem;
  problem.weights = &d.weights;
  problem.activations = &d.activations;
  problem.topk_ids = d.oracle_ids.data();
  problem.topk_weights = d.oracle_weights.data();
  problem.num_tokens = t;
  problem.top_k = c.top_k;
  problem.local_expert_offset = c.local_expert_offset;
  const double c_gs = calibrate_intermediate_scale(problem);
  if (c_gs > 0) set_intermediate_scale(&d.weights, c_gs);
  d.oracle_output = oracle_moe(problem).output;
  return d;
}

cakemoe::stepfun::MoeArgs layer_args(const LayerData& d) {
  const auto& v = d.weights.view;
  cakemoe::stepfun::MoeArgs a;
  a.family = d.config.family;
  a.hidden_states = d.activations.hidden_states;
  a.hidden_states_scale = d.activations.hidden_states_scale;
  a.per_token_scale = d.activations.per_token_scale;
  set_weight_args(&a, v);
  if (d.config.precomputed) {
    a.topk_ids = d.topk_ids;
    a.topk_weights = d.topk_weights;
  } else {
    a.routing_logits = d.routing_logits;
    a.routed_scaling_factor = d.config.routed_scaling_factor;
  }
  a.num_experts = d.config.num_experts;
  a.top_k = d.config.top_k;
  a.local_expert_offset = d.config.local_expert_offset;
  a.local_num_experts = d.weights.dims.num_experts;
  return a;
}

std::string LayerCheck::summary() const {
  std::ostringstream os;
  os.precision(3);
  os << "rel_frob=" << std::scientific << rel_frobenius << " (bar " << frobenius_bar << ")"
     << std::fixed << " within=" << fraction_within * 100 << "% (bar " << percent_bar * 100
     << "%) max_abs=" << max_abs_error << " unwritten=" << unwritten << (pass ? " PASS" : " FAIL");
  return os.str();
}

LayerCheck check_layer_output(const LayerData& d, const uint16_t* output) {
  LayerCheck r;
  const Family f = d.config.family;
  const bool nvfp4 = is_nvfp4_family(f);
  r.frobenius_bar = nvfp4 ? 2e-2 : 1e-2;
  // spec §10.2 percents; mxfp8 uses our own 0.9 bar (spec §12.10) instead of FlashInfer's 0.79.
  r.percent_bar = f == Family::kBF16 ? 0.925 : f == Family::kMXFP8 ? 0.9 : 0.92;
  const double atol = 0.1, rtol = 0.85;
  double num = 0, den = 0;
  int64_t within = 0;
  const size_t n = d.oracle_output.size();
  for (size_t i = 0; i < n; ++i) {
    const double a = formats::bf16_to_float(output[i]), b = d.oracle_output[i];
    if (std::isnan(a)) {
      ++r.unwritten;
      continue;
    }
    num += (a - b) * (a - b);
    den += b * b;
    r.max_abs_error = std::max(r.max_abs_error, std::fabs(a - b));
    if (std::fabs(a - b) <= atol + rtol * std::fabs(b)) ++within;
  }
  r.rel_frobenius = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  r.fraction_within = n ? static_cast<double>(within) / n : 0;
  r.pass =
      r.unwritten == 0 && r.rel_frobenius <= r.frobenius_bar && r.fraction_within >= r.percent_bar;
  return r;
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
