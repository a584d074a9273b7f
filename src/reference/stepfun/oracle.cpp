#include "reference/stepfun/oracle.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "formats/quantize.h"
#include "reference/stepfun/activations.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using core::require;

/// Hidden states [T, H] in fp64 real units (exact products of the stored values and scales).
std::vector<double> dequantize_hidden(const PreparedWeights& w, const StepFunActivations& a,
                                      int64_t tokens) {
  const Family f = w.view.family;
  const int64_t h = w.dims.hidden;
  ActivationMatrix m;
  m.family = f;
  m.data = a.hidden_states.data();
  m.scale = a.hidden_states_scale.defined() ? a.hidden_states_scale.ptr<uint8_t>() : nullptr;
  m.scale_layout = SfLayout::kLinear;
  m.cols = h;
  const double a_decode = (f == Family::kNVFP4 || f == Family::kFP8)
                              ? 1.0 / static_cast<float>(w.view.hidden_states_scale_global)
                              : 1.0;
  std::vector<double> x(static_cast<size_t>(tokens * h));
  std::vector<float> row(static_cast<size_t>(h));
  for (int64_t t = 0; t < tokens; ++t) {
    load_activation_row(m, t, row.data());
    const double decode = f == Family::kNVFP4BF16Tok ? a.per_token_scale.ptr<float>()[t] : a_decode;
    for (int64_t k = 0; k < h; ++k) x[t * h + k] = row[k] * decode;
  }
  return x;
}

/// One expert's logical weights in fp64 real units ([2I, H] rows [up; gate], or [H, I]).
std::vector<double> dequantize_expert(const PreparedWeights& w, bool gemm1, int64_t e) {
  const WeightMatrix m = gemm1 ? gemm1_matrix(w.view, w.dims) : gemm2_matrix(w.view, w.dims);
  const std::vector<float>& globals = gemm1 ? w.w1_global : w.w2_global;
  const double decode = has_output_scalars(w.view.family) ? 1.0 / globals[e] : 1.0;
  std::vector<double> out(static_cast<size_t>(m.rows * m.cols));
  std::vector<float> row(static_cast<size_t>(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    const int64_t physical =
        gemm1 ? formats::w1_physical_row(r, w.dims.intermediate) : formats::w2_physical_row(r);
    load_weight_row(m, e, physical, row.data());
    for (int64_t k = 0; k < m.cols; ++k) out[r * m.cols + k] = row[k] * decode;
  }
  return out;
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

/// Emulates the family's FC2-input quantization of one activation row (spec §10.1), in place.
void quantize_fc2_input(Family f, double c_gs, int64_t inter, double* v) {
  std::vector<float> x(static_cast<size_t>(inter));
  for (int64_t i = 0; i < inter; ++i) x[i] = static_cast<float>(v[i]);
  const float c = static_cast<float>(c_gs);
  uint8_t sf = 0, q32[formats::kMxfp8Block];
  switch (f) {
    case Family::kBF16:
      for (int64_t i = 0; i < inter; ++i)
        v[i] = formats::bf16_to_float(formats::bf16_from_float(x[i]));
      break;
    case Family::kFP8:
      for (int64_t i = 0; i < inter; ++i) {
        v[i] = formats::e4m3_to_float(formats::fp8_quantize(x[i], c)) / static_cast<double>(c);
      }
      break;
    case Family::kMXFP8:
      for (int64_t b = 0; b < inter / formats::kMxfp8Block; ++b) {
        formats::mxfp8_quantize_block32(&x[b * formats::kMxfp8Block], q32, &sf);
        for (int i = 0; i < formats::kMxfp8Block; ++i) {
          v[b * formats::kMxfp8Block + i] =
              static_cast<double>(formats::e4m3_to_float(q32[i])) * formats::ue8m0_to_float(sf);
        }
      }
      break;
    case Family::kNVFP4:
    case Family::kNVFP4BF16Tok: {
      double decode = 1.0 / static_cast<double>(c);
      std::vector<uint8_t> row_packed(static_cast<size_t>(inter / 2));
      std::vector<uint8_t> row_sf(static_cast<size_t>(inter / formats::kNvfp4Block));
      if (f == Family::kNVFP4BF16Tok) {
        // NOTE: spec §6: FC1 stores bf16, requant quantizes each row with its own p.
        for (float& xi : x) xi = formats::bf16_to_float(formats::bf16_from_float(xi));
        decode = formats::nvfp4_per_token_quantize_row(x.data(), inter, 1.0f / kNvfp4GlobalMax,
                                                       row_packed.data(), row_sf.data());
      } else {
        for (int64_t b = 0; b < inter / formats::kNvfp4Block; ++b) {
          formats::nvfp4_quantize_block16(&x[b * formats::kNvfp4Block], c,
                                          &row_packed[b * formats::kNvfp4Block / 2], &row_sf[b]);
        }
      }
      for (int64_t i = 0; i < inter; ++i) {
        const uint8_t code = formats::e2m1x2_unpack(row_packed[i / 2], static_cast<int>(i % 2));
        v[i] = static_cast<double>(formats::e2m1_to_float(code)) *
               formats::e4m3_to_float(row_sf[i / formats::kNvfp4Block]) * decode;
      }
      break;
    }
  }
}

/// Runs the oracle; `with_fc2` false stops after the SwiGLUStep activation.
OracleResult run(const OracleProblem& p, bool with_fc2) {
  require(p.weights != nullptr, "weights", "is required");
  require(p.activations != nullptr, "activations", "is required");
  require(p.topk_ids != nullptr, "topk_ids", "is required");
  require(p.topk_weights != nullptr || !with_fc2, "topk_weights", "is required");
  require(p.num_tokens > 0 && p.top_k > 0, "num_tokens", "needs T > 0 and K > 0");
  const PreparedWeights& w = *p.weights;
  const StepFunActivations& a = *p.activations;
  const Family f = w.view.family;
  const int64_t tokens = p.num_tokens, top_k = p.top_k, pairs = tokens * top_k;
  const int64_t h = w.dims.hidden, inter = w.dims.intermediate, experts = w.dims.num_experts;
  require(a.hidden_states.defined() && a.hidden_states.size(0) == tokens, "activations",
          "hidden_states must have num_tokens = " + std::to_string(tokens) + " rows");
  require(f != Family::kNVFP4BF16Tok || a.per_token_scale.defined(), "activations",
          "per_token_scale is required for nvfp4_bf16tok");

  OracleResult out;
  out.local.assign(static_cast<size_t>(pairs), false);
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(experts));
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t e = static_cast<int64_t>(p.topk_ids[i]) - p.local_expert_offset;
    if (e < 0 || e >= experts) continue;
    out.local[i] = true;
    by_expert[e].push_back(i);
  }
  const std::vector<double> x = dequantize_hidden(w, a, tokens);
  out.activation.assign(static_cast<size_t>(pairs * inter), 0.0);
  std::vector<double> y(with_fc2 ? static_cast<size_t>(pairs * h) : 0, 0.0);
  const double c_gs = w.view.intermediate_scale_global;

  core::parallel_for(experts, [&](int64_t e) {
    if (by_expert[e].empty()) return;
    const std::vector<double> w1 = dequantize_expert(w, true, e);
    const std::vector<double> w2 =
        with_fc2 ? dequantize_expert(w, false, e) : std::vector<double>();
    const double limit = w.step_limits[e];
    std::vector<double> q(static_cast<size_t>(inter));
    for (int64_t pair : by_expert[e]) {
      const double* xt = &x[(pair / top_k) * h];
      double* act = &out.activation[pair * inter];
      for (int64_t i = 0; i < inter; ++i) {
        const double up = dot(xt, &w1[i * h], h);
        const double gate = dot(xt, &w1[(inter + i) * h], h);
        const double silu = gate / (1.0 + std::exp(-gate));
        act[i] = std::min(silu, limit) * std::min(std::max(up, -limit), limit);
      }
      if (!with_fc2) continue;
      std::copy(act, act + inter, q.begin());
      quantize_fc2_input(f, c_gs, inter, q.data());
      for (int64_t j = 0; j < h; ++j) y[pair * h + j] = dot(q.data(), &w2[j * inter], inter);
    }
  });
  if (!with_fc2) return out;

  out.output.assign(static_cast<size_t>(tokens * h), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t pair = t * top_k + k;
      if (!out.local[pair]) continue;
      const double weight = p.topk_weights[pair];
      for (int64_t j = 0; j < h; ++j) out.output[t * h + j] += weight * y[pair * h + j];
    }
  }
  return out;
}

}  // namespace

OracleResult oracle_moe(const OracleProblem& problem) { return run(problem, true); }

double calibrate_intermediate_scale(const OracleProblem& problem) {
  const Family f = problem.weights != nullptr ? problem.weights->view.family : Family::kBF16;
  if (f != Family::kNVFP4 && f != Family::kFP8) return 0.0;
  const OracleResult r = run(problem, false);
  double amax = 0.0;
  for (double v : r.activation) amax = std::max(amax, std::fabs(v));
  if (amax == 0.0) return 0.0;
  return (f == Family::kNVFP4 ? kNvfp4GlobalMax : kFp8GlobalMax) / amax;
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
