#include "stepfun/gpu/stepfun_gpu_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/cuda_util.h"
#include "formats/codecs.h"
#include "reference/stepfun/activations.h"
#include "reference/stepfun/oracle.h"
#include "reference/stepfun/routing.h"

namespace cakemoe {
namespace gpu_testbed {
namespace ref = reference::stepfun;
using stepfun::Family;

namespace {

/// |hidden| bound used for the fixed a_gs: 12 * 6 sigma.
constexpr double kHiddenBound = 72.0;

/// Spec §10.3 routing regimes: uniform randn; ragged: token t prefers experts near
/// floor((t*E/T)^2 / E) (logit - 0.25 * distance); randperm: the ragged rows shuffled.
Tensor regime_logits(ref::RoutingRegime regime, int64_t tokens, int64_t experts,
                     std::mt19937_64& engine) {
  Tensor logits = Tensor::empty({tokens, experts}, DType::kBF16);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<int64_t> row_of(tokens);
  std::iota(row_of.begin(), row_of.end(), 0);
  if (regime == ref::RoutingRegime::kRandperm) std::shuffle(row_of.begin(), row_of.end(), engine);
  for (int64_t t = 0; t < tokens; ++t) {
    const double pos = static_cast<double>(t) * experts / tokens;
    const double center = std::floor(pos * pos / experts);
    for (int64_t e = 0; e < experts; ++e) {
      float v = normal(engine);
      if (regime != ref::RoutingRegime::kUniform) {
        v -= 0.25f * static_cast<float>(std::fabs(static_cast<double>(e) - center));
      }
      logits.ptr<uint16_t>()[row_of[t] * experts + e] = formats::bf16_from_float(v);
    }
  }
  return logits;
}

double fixed_a_gs(Family f) {
  if (f == Family::kNVFP4) return ref::kNvfp4GlobalMax / kHiddenBound;
  if (f == Family::kFP8) return ref::kFp8GlobalMax / kHiddenBound;
  return 0.0;
}

Tensor deep_copy(const Tensor& t) {
  return t.defined() ? core::copy_to(t, Device::cpu()) : t;
}

}  // namespace

Tensor gather_rows(const TensorView& t, const std::vector<int64_t>& rows) {
  std::vector<int64_t> shape = t.sizes();
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(shape[0]);
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, t.dtype);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(static_cast<char*>(out.data()) + i * row_bytes,
                static_cast<const char*>(t.data) + rows[i] * row_bytes, row_bytes);
  }
  return out;
}

std::unique_ptr<MatrixWeights> make_matrix_weights(const ref::LayerCase& shape, bool upload) {
  auto w = std::make_unique<MatrixWeights>();
  w->shape = shape;
  const int64_t e = shape.num_experts, h = shape.hidden, inter = shape.intermediate;
  const Tensor w1 = ref::normal_bf16({e, 2 * inter, h}, shape.seed + 2, 1.f / std::sqrt(float(h)));
  const Tensor w2 = ref::normal_bf16({e, h, inter}, shape.seed + 3, 1.f / std::sqrt(float(inter)));
  stepfun::WeightPrepOptions o;
  o.family = shape.family;
  o.step_limits.resize(e);
  for (int64_t x = 0; x < e; ++x) {
    o.step_limits[x] = shape.limits == ref::LimitMode::k7    ? 7.f
                       : shape.limits == ref::LimitMode::k16 ? 16.f
                                                              : (x % 2 == 0 ? 7.f : 16.f);
  }
  o.hidden_states_scale_global = fixed_a_gs(shape.family);
  w->host = ref::prepare_weights(w1, w2, o);
  if (!upload) return w;
  const stepfun::StepFunWeights& v = w->host.view;
  stepfun::MoeArgs& d = w->device;
  d.family = shape.family;
  d.gemm1_weights = w->pool.copy(v.gemm1_weights);
  d.gemm1_weights_scale = w->pool.copy(v.gemm1_weights_scale);
  d.gemm2_weights = w->pool.copy(v.gemm2_weights);
  d.gemm2_weights_scale = w->pool.copy(v.gemm2_weights_scale);
  return w;
}

MatrixCase make_matrix_case(const MatrixWeights& w, ref::RoutingRegime regime, int64_t tokens,
                            bool precomputed, int64_t max_checked) {
  MatrixCase c;
  const ref::LayerCase& s = w.shape;
  const Family f = s.family;
  const uint64_t seed = s.seed + 1000 * static_cast<uint64_t>(tokens) +
                        static_cast<uint64_t>(regime) * 17 + (precomputed ? 5 : 0);
  std::mt19937_64 engine(seed);
  const Tensor hidden = ref::normal_bf16({tokens, s.hidden}, seed + 1, 12.f);
  const Tensor logits = regime_logits(regime, tokens, s.num_experts, engine);
  ref::RoutingConfig rc;
  rc.num_tokens = tokens;
  rc.top_k = s.top_k;
  rc.num_experts = s.num_experts;
  rc.local_num_experts = s.num_experts;
  const ref::TopK topk = ref::route_from_logits(rc, logits.data(), DType::kBF16);
  const int64_t pairs = tokens * s.top_k;
  std::vector<float> weights(static_cast<size_t>(pairs));
  Tensor ids, fp32_weights;
  if (precomputed) {
    ids = Tensor::empty({tokens, s.top_k}, DType::kInt32);
    fp32_weights = Tensor::empty({tokens, s.top_k}, DType::kFP32);
    std::copy(topk.ids.begin(), topk.ids.end(), ids.ptr<int32_t>());
    std::uniform_real_distribution<float> uniform(0.1f, 1.f);
    for (int64_t t = 0; t < tokens; ++t) {
      float sum = 0.f;
      for (int64_t k = 0; k < s.top_k; ++k) sum += (weights[t * s.top_k + k] = uniform(engine));
      for (int64_t k = 0; k < s.top_k; ++k) weights[t * s.top_k + k] /= sum;
    }
    std::copy(weights.begin(), weights.end(), fp32_weights.ptr<float>());
  } else {
    for (int64_t i = 0; i < pairs; ++i) weights[i] = formats::bf16_to_float(topk.weights[i]);
  }
  const double a_gs = fixed_a_gs(f);
  const stepfun::StepFunActivations act = ref::prepare_activations(f, hidden, a_gs);

  // The checked tokens and their oracle (per token, so a subset is exact for those rows).
  const int64_t n = std::min(tokens, max_checked);
  for (int64_t i = 0; i < n; ++i) c.checked.push_back(i * tokens / n);
  stepfun::StepFunActivations sub;
  sub.hidden_states = gather_rows(act.hidden_states, c.checked);
  if (act.hidden_states_scale.defined()) {
    sub.hidden_states_scale = gather_rows(act.hidden_states_scale, c.checked);
  }
  if (act.per_token_scale.defined()) {
    sub.per_token_scale = gather_rows(act.per_token_scale, c.checked);
  }
  std::vector<int32_t> sub_ids;
  std::vector<float> sub_weights;
  for (int64_t t : c.checked) {
    for (int64_t k = 0; k < s.top_k; ++k) {
      sub_ids.push_back(topk.ids[t * s.top_k + k]);
      sub_weights.push_back(weights[t * s.top_k + k]);
    }
  }
  c.weights = w.host;
  stepfun::StepFunWeights& v = c.weights.view;
  for (Tensor* x : {&v.output1_scale_scalar, &v.output1_scale_gate_scalar,
                    &v.output2_scale_scalar, &v.gemm1_clamp_limit}) {
    *x = deep_copy(*x);
  }
  ref::OracleProblem problem;
  problem.weights = &c.weights;
  problem.activations = &sub;
  problem.topk_ids = sub_ids.data();
  problem.topk_weights = sub_weights.data();
  problem.num_tokens = n;
  problem.top_k = s.top_k;
  const double c_gs = ref::calibrate_intermediate_scale(problem);
  if (c_gs > 0) ref::set_intermediate_scale(&c.weights, c_gs);
  c.check.config = s;
  c.check.config.num_tokens = n;
  c.check.config.regime = regime;
  c.check.config.precomputed = precomputed;
  c.check.oracle_output = ref::oracle_moe(problem).output;

  // Every token, through the public API's arguments.
  c.keep = {act.hidden_states, act.hidden_states_scale, act.per_token_scale, logits, ids,
            fp32_weights};
  stepfun::MoeArgs& a = c.host;
  a.family = f;
  a.hidden_states = act.hidden_states;
  a.hidden_states_scale = act.hidden_states_scale;
  a.per_token_scale = act.per_token_scale;
  ref::set_weight_args(&a, v);
  if (precomputed) {
    a.topk_ids = ids;
    a.topk_weights = fp32_weights;
  } else {
    a.routing_logits = logits;
  }
  a.num_experts = s.num_experts;
  a.top_k = s.top_k;
  a.local_num_experts = s.num_experts;
  return c;
}

stepfun::MoeArgs device_case_args(const MatrixCase& c, const MatrixWeights& w, DevicePool& pool) {
  stepfun::MoeArgs a = device_args_with_weights(c.host, w.device, pool);
  a.output1_scale_scalar = pool.copy(c.host.output1_scale_scalar);
  a.output1_scale_gate_scalar = pool.copy(c.host.output1_scale_gate_scalar);
  a.output2_scale_scalar = pool.copy(c.host.output2_scale_scalar);
  a.gemm1_clamp_limit = pool.copy(c.host.gemm1_clamp_limit);
  return a;
}

}  // namespace gpu_testbed
}  // namespace cakemoe
