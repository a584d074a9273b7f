// Shared fixtures of the StepFun GEMM-stage reference tests: seeded §10.3-style problems, the
// prepared operands, routing tables, the fc1 -> (requant) -> fc2 -> fp64 finalize pipeline and
// test-side decoders written from the spec text (no src/ layout or reader code).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cakemoe/stepfun.h"
#include "formats/codecs.h"
#include "reference/stepfun/activations.h"
#include "reference/stepfun/fc1.h"
#include "reference/stepfun/fc2.h"
#include "reference/stepfun/oracle.h"
#include "reference/stepfun/requant.h"
#include "reference/stepfun/tables.h"
#include "reference/stepfun/weights.h"
#include "reference/stepfun/families.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace testing {

using ::cakemoe::stepfun::kAllFamilies;

inline const char* name(Family f) { return ::cakemoe::stepfun::family_name(f); }

using testbed::random_bf16;

inline std::vector<float> floats_of(const Tensor& bf16) {
  std::vector<float> out(static_cast<size_t>(bf16.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = formats::bf16_to_float(bf16.ptr<uint16_t>()[i]);
  return out;
}

/// Spec §4.4 (c)/(e) and linear SF offsets, restated from the spec text.
inline int64_t spec_sf_offset(SfLayout layout, int64_t r, int64_t c, int64_t cols) {
  const int64_t c4 = (cols + 3) / 4;
  if (layout == SfLayout::kR8C4) return (r / 8) * (c4 * 32) + (c / 4) * 32 + (r % 8) * 4 + c % 4;
  if (layout == SfLayout::kR128C4) {
    return (r / 128) * (c4 * 512) + (c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
  }
  return r * cols + c;
}

struct Dims {
  int64_t tokens = 32, hidden = 512, inter = 256, experts = 8, top_k = 2, tile = 8;
  uint64_t seed = 20261004;
  std::vector<float> limits;  ///< empty: mixed 7 / 16 (even / odd experts)
};

/// One family's prepared problem (§10.3 data: hidden 12*randn, W1 randn/sqrt(H), W2 randn/sqrt(I)).
struct Case {
  Dims dims;
  Family family = Family::kBF16;
  Tensor hidden, w1, w2;  // logical bf16
  PreparedWeights weights;
  StepFunActivations acts;
  std::vector<int32_t> ids;
  std::vector<float> topk_weights;
  RoutingTables tables;
  int64_t max_padded = 0;
  SfLayout layout = SfLayout::kR8C4;

  OracleProblem oracle_problem() const {
    OracleProblem p;
    p.weights = &weights;
    p.activations = &acts;
    p.topk_ids = ids.data();
    p.topk_weights = topk_weights.data();
    p.num_tokens = dims.tokens;
    p.top_k = dims.top_k;
    return p;
  }
  GemmTables gemm_tables() const {
    GemmTables t;
    t.permuted_idx_to_token_idx = tables.permuted_idx_to_token_idx.data();
    t.cta_idx_xy_to_batch_idx = tables.cta_idx_xy_to_batch_idx.data();
    t.cta_idx_xy_to_mn_limit = tables.cta_idx_xy_to_mn_limit.data();
    t.num_non_exiting_ctas = tables.num_non_exiting_ctas;
    t.cta_table_entries = static_cast<int64_t>(tables.cta_idx_xy_to_batch_idx.size());
    t.tile = dims.tile;
    return t;
  }
  float c_gs() const { return static_cast<float>(weights.view.intermediate_scale_global); }
};

/// Prepares a case from given logical tensors and routing (ids global, weights [T*K]).
inline Case make_case_from(Family family, const Dims& d, Tensor hidden, Tensor w1, Tensor w2,
                           std::vector<int32_t> ids, std::vector<float> topk_weights,
                           bool calibrate = true) {
  Case c;
  c.dims = d;
  c.family = family;
  c.hidden = hidden, c.w1 = w1, c.w2 = w2;
  c.ids = std::move(ids);
  c.topk_weights = std::move(topk_weights);
  float amax = 0.0f;
  for (float v : floats_of(c.hidden)) amax = std::max(amax, std::fabs(v));
  WeightPrepOptions o;
  o.family = family;
  o.step_limits = d.limits;
  if (o.step_limits.empty()) {
    for (int64_t e = 0; e < d.experts; ++e) o.step_limits.push_back(e % 2 ? 16.0f : 7.0f);
  }
  if (family == Family::kNVFP4) o.hidden_states_scale_global = 2688.0 / amax;
  if (family == Family::kFP8) o.hidden_states_scale_global = 448.0 / amax;
  c.weights = reference::stepfun::prepare_weights(c.w1, c.w2, o);
  c.acts = reference::stepfun::prepare_activations(family, c.hidden, o.hidden_states_scale_global);
  if (calibrate && (family == Family::kNVFP4 || family == Family::kFP8)) {
    set_intermediate_scale(&c.weights, calibrate_intermediate_scale(c.oracle_problem()));
  }
  RoutingConfig rc;
  rc.num_tokens = d.tokens;
  rc.top_k = d.top_k;
  rc.num_experts = d.experts;
  rc.local_num_experts = d.experts;
  rc.tile = d.tile;
  c.tables = build_tables(rc, c.ids.data());
  c.max_padded = table_sizes(rc).max_padded;
  c.layout = d.tile <= 64 ? SfLayout::kR8C4 : SfLayout::kR128C4;
  return c;
}

/// A seeded §10.3-style case: random data, K distinct random experts per token.
inline Case make_case(Family family, const Dims& d, bool calibrate = true) {
  testbed::Rng rng(d.seed);
  Tensor hidden = random_bf16({d.tokens, d.hidden}, rng, 12.0f);
  Tensor w1 =
      random_bf16({d.experts, 2 * d.inter, d.hidden}, rng, 1.0f / std::sqrt(float(d.hidden)));
  Tensor w2 = random_bf16({d.experts, d.hidden, d.inter}, rng, 1.0f / std::sqrt(float(d.inter)));
  // K distinct experts per token, weights positive and normalized.
  std::vector<int32_t> ids;
  std::vector<float> topk_weights;
  for (int64_t t = 0; t < d.tokens; ++t) {
    std::vector<int32_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < d.top_k) {
      const int32_t e = static_cast<int32_t>(rng.integer(0, d.experts));
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    std::vector<float> w(static_cast<size_t>(d.top_k));
    float sum = 0.0f;
    for (float& x : w) sum += (x = rng.uniform(0.1f, 1.0f));
    for (int64_t k = 0; k < d.top_k; ++k) {
      ids.push_back(chosen[k]);
      topk_weights.push_back(w[k] / sum);
    }
  }
  return make_case_from(family, d, hidden, w1, w2, std::move(ids), std::move(topk_weights),
                        calibrate);
}

/// Bytes per FC1-output row and SF columns of a family (spec §4.2).
inline int64_t fc1_row_bytes(Family f, int64_t inter) {
  if (is_nvfp4_family(f) && f != Family::kNVFP4BF16Tok) return inter / 2;
  return f == Family::kFP8 || f == Family::kMXFP8 ? inter : 2 * inter;
}
inline int64_t sf_cols(Family f, int64_t inter) {
  return f == Family::kNVFP4 ? inter / 16 : f == Family::kMXFP8 ? inter / 32 : 0;
}
/// Bytes of an SF buffer covering `rows` rows in any of the three layouts.
inline int64_t sf_bytes(int64_t rows, int64_t cols) {
  return ((rows + 127) / 128) * 128 * ((cols + 3) / 4) * 4;
}

/// FC1 output of a case in its family format, buffers poisoned (0xFF) before the run.
struct Fc1Out {
  std::vector<uint8_t> data, scale;
};

inline Fc1Problem fc1_problem(const Case& c, Fc1Out* out) {
  const int64_t rows = c.max_padded, inter = c.dims.inter;
  out->data.assign(static_cast<size_t>(rows * fc1_row_bytes(c.family, inter)), 0xFF);
  out->scale.assign(static_cast<size_t>(sf_bytes(rows, sf_cols(c.family, inter))), 0xFF);
  const StepFunWeights& v = c.weights.view;
  Fc1Problem p;
  p.family = c.family;
  p.num_tokens = c.dims.tokens;
  p.hidden = c.dims.hidden;
  p.intermediate = inter;
  p.num_experts = c.dims.experts;
  p.hidden_states = c.acts.hidden_states.data();
  p.hidden_states_scale =
      c.acts.hidden_states_scale.defined() ? c.acts.hidden_states_scale.ptr<uint8_t>() : nullptr;
  p.per_token_scale =
      c.acts.per_token_scale.defined() ? c.acts.per_token_scale.ptr<float>() : nullptr;
  p.gemm1_weights = v.gemm1_weights.data();
  p.gemm1_weights_scale =
      v.gemm1_weights_scale.defined() ? v.gemm1_weights_scale.ptr<uint8_t>() : nullptr;
  p.output1_scale_scalar =
      v.output1_scale_scalar.defined() ? v.output1_scale_scalar.ptr<float>() : nullptr;
  p.output1_scale_gate_scalar =
      v.output1_scale_gate_scalar.defined() ? v.output1_scale_gate_scalar.ptr<float>() : nullptr;
  p.gemm1_clamp_limit = v.gemm1_clamp_limit.ptr<float>();
  p.tables = c.gemm_tables();
  p.gemm1_output = out->data.data();
  p.gemm1_output_scale = out->scale.data();
  p.output_scale_layout = c.layout;
  p.output_rows = rows;
  return p;
}

/// Row `row` of an FC1 output decoded to real (physical) units, from the spec formats.
inline std::vector<double> decode_fc1_row(const Case& c, const Fc1Out& out, int64_t row) {
  const int64_t inter = c.dims.inter;
  std::vector<double> v(static_cast<size_t>(inter));
  const uint8_t* bytes = out.data.data() + row * fc1_row_bytes(c.family, inter);
  const int64_t cols = sf_cols(c.family, inter);
  for (int64_t i = 0; i < inter; ++i) {
    switch (c.family) {
      case Family::kNVFP4: {
        const uint8_t code = (i % 2) ? bytes[i / 2] >> 4 : bytes[i / 2] & 0xF;
        const uint8_t sf = out.scale[spec_sf_offset(c.layout, row, i / 16, cols)];
        v[i] = double(formats::e2m1_to_float(code)) * formats::e4m3_to_float(sf) / c.c_gs();
        break;
      }
      case Family::kFP8:
        v[i] = double(formats::e4m3_to_float(bytes[i])) / c.c_gs();
        break;
      case Family::kMXFP8: {
        const uint8_t sf = out.scale[spec_sf_offset(c.layout, row, i / 32, cols)];
        v[i] = std::ldexp(double(formats::e4m3_to_float(bytes[i])), int(sf) - 127);
        break;
      }
      default: {
        uint16_t b;
        std::memcpy(&b, bytes + 2 * i, 2);
        v[i] = formats::bf16_to_float(b);
      }
    }
  }
  return v;
}

/// Everything downstream of FC1: requant (nvfp4_bf16tok), FC2, fp64 finalize of the bf16 rows.
struct PipelineOut {
  Fc1Out fc1;
  std::vector<uint8_t> fc2_in, fc2_in_scale;  // requant output (nvfp4_bf16tok)
  std::vector<float> row_scale;               // requant per-row decode scales
  std::vector<uint16_t> gemm2;                // [max_padded, H], poisoned before FC2
  std::vector<double> output;                 // [T, H]
};

inline Fc2Problem fc2_problem(const Case& c, PipelineOut* out) {
  const int64_t rows = c.max_padded, inter = c.dims.inter;
  const StepFunWeights& v = c.weights.view;
  Fc2Problem p;
  p.family = c.family;
  p.hidden = c.dims.hidden;
  p.intermediate = inter;
  p.num_experts = c.dims.experts;
  p.gemm2_input = out->fc1.data.data();
  p.gemm2_input_scale = out->fc1.scale.data();
  if (c.family == Family::kNVFP4BF16Tok) {
    out->fc2_in.assign(static_cast<size_t>(rows * inter / 2), 0xFF);
    out->fc2_in_scale.assign(static_cast<size_t>(sf_bytes(rows, inter / 16)), 0xFF);
    out->row_scale.assign(static_cast<size_t>(rows), NAN);
    requant_nvfp4_per_token(reinterpret_cast<const uint16_t*>(out->fc1.data.data()), rows, inter,
                            c.tables.expanded_idx_to_permuted_idx.data(),
                            c.dims.tokens * c.dims.top_k, c.layout, kRequantGlobalScaleInv,
                            out->fc2_in.data(), out->fc2_in_scale.data(), out->row_scale.data());
    p.gemm2_input = out->fc2_in.data();
    p.gemm2_input_scale = out->fc2_in_scale.data();
    p.per_token_scale = out->row_scale.data();
  }
  p.input_scale_layout = c.layout;
  p.gemm2_weights = v.gemm2_weights.data();
  p.gemm2_weights_scale =
      v.gemm2_weights_scale.defined() ? v.gemm2_weights_scale.ptr<uint8_t>() : nullptr;
  p.output2_scale_scalar =
      v.output2_scale_scalar.defined() ? v.output2_scale_scalar.ptr<float>() : nullptr;
  p.tables = c.gemm_tables();
  out->gemm2.assign(static_cast<size_t>(rows * c.dims.hidden), 0xFFFF);
  p.gemm2_output = out->gemm2.data();
  p.rows = rows;
  return p;
}

inline PipelineOut run_pipeline(const Case& c) {
  PipelineOut out;
  fc1(fc1_problem(c, &out.fc1));
  fc2(fc2_problem(c, &out));
  const int64_t h = c.dims.hidden, top_k = c.dims.top_k;
  out.output.assign(static_cast<size_t>(c.dims.tokens * h), 0.0);
  for (int64_t t = 0; t < c.dims.tokens; ++t) {
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t slot = c.tables.expanded_idx_to_permuted_idx[t * top_k + k];
      if (slot < 0) continue;
      for (int64_t j = 0; j < h; ++j) {
        out.output[t * h + j] +=
            double(c.topk_weights[t * top_k + k]) * formats::bf16_to_float(out.gemm2[slot * h + j]);
      }
    }
  }
  return out;
}

/// Valid permuted rows (slots that hold a token) of a case.
inline std::vector<bool> valid_rows(const Case& c) {
  std::vector<bool> valid(static_cast<size_t>(c.max_padded), false);
  for (int32_t slot : c.tables.expanded_idx_to_permuted_idx) {
    if (slot >= 0) valid[slot] = true;
  }
  return valid;
}

}  // namespace testing
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
