#include "reference/stepfun/fc1.h"

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
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using core::require;

// NOTE: spec §5.1: a CTA covers 128 physical W1 rows = 64 output features ([up; gate] pairs).
constexpr int64_t kFeatures = 64;
constexpr int64_t kPhysicalRows = 2 * kFeatures;

void check_problem(const Fc1Problem& p) {
  const Family f = p.family;
  require(p.num_tokens > 0, "hidden_states", "needs T > 0 tokens");
  require(p.hidden > 0 && p.hidden % 64 == 0, "hidden", "must be a positive multiple of 64");
  require(p.intermediate > 0 && p.intermediate % 64 == 0, "intermediate",
          "must be a positive multiple of 64");
  require(p.num_experts > 0, "num_experts", "must be > 0");
  require(p.hidden_states != nullptr, "hidden_states", "is required");
  require(p.gemm1_weights != nullptr, "gemm1_weights", "is required");
  require(p.gemm1_clamp_limit != nullptr, "gemm1_clamp_limit", "is required");
  require(p.gemm1_output != nullptr, "gemm1_output", "is required");
  require(p.tables.permuted_idx_to_token_idx != nullptr || p.tables.num_non_exiting_ctas == 0,
          "permuted_idx_to_token_idx", "is required");
  if (has_weight_block_scales(f)) {
    require(p.hidden_states_scale != nullptr, "hidden_states_scale", "is required");
    require(p.gemm1_weights_scale != nullptr, "gemm1_weights_scale", "is required");
  }
  if (f == Family::kNVFP4 || f == Family::kMXFP8) {
    require(p.gemm1_output_scale != nullptr, "gemm1_output_scale", "is required");
  }
  if (has_output_scalars(f)) {
    require(p.output1_scale_scalar != nullptr, "output1_scale_scalar", "is required");
    require(p.output1_scale_gate_scalar != nullptr, "output1_scale_gate_scalar", "is required");
  }
  if (f == Family::kNVFP4BF16Tok) {
    require(p.per_token_scale != nullptr, "per_token_scale", "is required");
  }
}

float clamp_symmetric(float x, float limit) { return std::min(std::max(x, -limit), limit); }

/// SwiGLUStep epilogue of spec §5.2 for one (up, gate) accumulator pair.
float epilogue_value(Family f, float up, float g, float sg, float sc, float cl) {
  if (f == Family::kBF16 || f == Family::kMXFP8) {
    // Physical units: v = clamp(up, -L, L) * min(silu(g), L).
    return clamp_symmetric(up, cl) * std::min(g * sigmoid_fp32(g), cl);
  }
  // Raw units: u' = clamp(up, -cl, cl); a = min(g*sigmoid(g*sg), cl); v = u'*sc*sg*a.
  const float u = clamp_symmetric(up, cl);
  const float a = std::min(g * sigmoid_fp32(g * sg), cl);
  return u * sc * sg * a;
}

/// Writes the 64 features [64*block, 64*block + 64) of permuted row `row` in the family format.
void store_features(const Fc1Problem& p, int64_t row, int64_t block, const float* v) {
  const int64_t inter = p.intermediate, f0 = block * kFeatures;
  switch (p.family) {
    case Family::kNVFP4: {
      auto* packed = static_cast<uint8_t*>(p.gemm1_output) + row * (inter / 2);
      const int64_t num_sf_cols = inter / formats::kNvfp4Block;
      for (int64_t b = 0; b < kFeatures / formats::kNvfp4Block; ++b) {
        const int64_t f = f0 + b * formats::kNvfp4Block;
        formats::nvfp4_quantize_block16_unit(
            v + b * formats::kNvfp4Block, packed + f / 2,
            p.gemm1_output_scale + formats::sf_offset(p.output_scale_layout, row,
                                                      f / formats::kNvfp4Block, num_sf_cols));
      }
      break;
    }
    case Family::kMXFP8: {
      auto* q = static_cast<uint8_t*>(p.gemm1_output) + row * inter;
      const int64_t num_sf_cols = inter / formats::kMxfp8Block;
      for (int64_t b = 0; b < kFeatures / formats::kMxfp8Block; ++b) {
        const int64_t f = f0 + b * formats::kMxfp8Block;
        formats::mxfp8_quantize_block32(
            v + b * formats::kMxfp8Block, q + f,
            p.gemm1_output_scale + formats::sf_offset(p.output_scale_layout, row,
                                                      f / formats::kMxfp8Block, num_sf_cols));
      }
      break;
    }
    case Family::kFP8: {
      auto* q = static_cast<uint8_t*>(p.gemm1_output) + row * inter + f0;
      for (int64_t j = 0; j < kFeatures; ++j) q[j] = formats::e4m3_from_float(v[j]);
      break;
    }
    case Family::kBF16:
    case Family::kNVFP4BF16Tok: {
      auto* out = static_cast<uint16_t*>(p.gemm1_output) + row * inter + f0;
      for (int64_t j = 0; j < kFeatures; ++j) out[j] = formats::bf16_from_float(v[j]);
      break;
    }
  }
}

}  // namespace

float sigmoid_fp32(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void fc1(const Fc1Problem& p) {
  check_problem(p);
  const ExpertRows groups = group_rows_by_expert(p.tables, p.num_experts, p.output_rows);
  const int64_t tokens = p.num_tokens, hidden = p.hidden;
  for (const auto& rows : groups.rows) {
    for (int64_t r : rows) {
      const int64_t t = p.tables.permuted_idx_to_token_idx[r];
      require(t >= -1 && t < tokens, "permuted_idx_to_token_idx",
              "valid row " + std::to_string(r) + " holds token " + std::to_string(t) +
                  ", outside [-1, T = " + std::to_string(tokens) + ")");
    }
  }

  // Activations in accumulator units, once per token.
  ActivationMatrix act_view;
  act_view.family = p.family;
  act_view.data = p.hidden_states;
  act_view.scale = p.hidden_states_scale;
  act_view.scale_layout = SfLayout::kLinear;  // spec §4.2: hidden-state scales are linear
  act_view.cols = hidden;
  std::vector<float> act(static_cast<size_t>(tokens * hidden));
  core::parallel_for(tokens,
                     [&](int64_t t) { load_activation_row(act_view, t, &act[t * hidden]); });
  const std::vector<float> zero_row(static_cast<size_t>(hidden), 0.0f);

  WeightMatrix w;
  w.family = p.family;
  w.data = p.gemm1_weights;
  w.scale = p.gemm1_weights_scale;
  w.num_experts = p.num_experts;
  w.rows = 2 * p.intermediate;
  w.cols = hidden;

  // One task per (expert with rows, 64-feature block).
  const int64_t blocks = p.intermediate / kFeatures;
  std::vector<int64_t> active;
  for (int64_t e = 0; e < p.num_experts; ++e) {
    if (!groups.rows[e].empty()) active.push_back(e);
  }
  core::parallel_for(static_cast<int64_t>(active.size()) * blocks, [&](int64_t task) {
    const int64_t e = active[task / blocks], block = task % blocks;
    const std::vector<int64_t>& rows = groups.rows[e];
    const int64_t m = static_cast<int64_t>(rows.size());

    // De-interleave the CTA's 128 physical rows: scratch rows [0, 64) up, [64, 128) gate.
    std::vector<float> wt(static_cast<size_t>(kPhysicalRows * hidden));
    int64_t slot[kPhysicalRows];
    for (int64_t j = 0; j < kPhysicalRows; ++j) {
      const int64_t logical = formats::w1_logical_row(block * kPhysicalRows + j, p.intermediate);
      slot[j] = logical < p.intermediate ? logical - block * kFeatures
                                         : kFeatures + logical - p.intermediate - block * kFeatures;
    }
    load_weight_rows(w, e, block * kPhysicalRows, kPhysicalRows, slot, wt.data());
    std::vector<const float*> a_rows(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = p.tables.permuted_idx_to_token_idx[rows[i]];
      a_rows[i] = t < 0 ? zero_row.data() : &act[t * hidden];
    }
    std::vector<float> acc(static_cast<size_t>(m * kPhysicalRows));
    rows_dot(a_rows.data(), m, wt.data(), kPhysicalRows, hidden, acc.data(), kPhysicalRows);

    const float cl = p.gemm1_clamp_limit[e];
    const float sg = has_output_scalars(p.family) ? p.output1_scale_gate_scalar[e] : 1.0f;
    const float sc = has_output_scalars(p.family) ? p.output1_scale_scalar[e] : 1.0f;
    float v[kFeatures];
    for (int64_t i = 0; i < m; ++i) {
      const float* up = &acc[i * kPhysicalRows];
      const float* gate = up + kFeatures;
      float token_scale = 1.0f;
      if (p.family == Family::kNVFP4BF16Tok) {
        // NOTE: spec §5.2: every raw accumulator is multiplied by the token's decode scale first.
        const int64_t t = p.tables.permuted_idx_to_token_idx[rows[i]];
        token_scale = t < 0 ? 0.0f : p.per_token_scale[t];
      }
      for (int64_t j = 0; j < kFeatures; ++j) {
        v[j] = epilogue_value(p.family, up[j] * token_scale, gate[j] * token_scale, sg, sc, cl);
      }
      store_features(p, rows[i], block, v);
    }
  });
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
