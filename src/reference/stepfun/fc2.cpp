#include "reference/stepfun/fc2.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "reference/stepfun/activations.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using core::require;

// NOTE: spec §7.1: an FC2 CTA covers 128 output columns (W2 rows); the 32-row shuffle of §4.4 (b)
// keeps every physical block of 128 rows on the same set of logical rows.
constexpr int64_t kBlockRows = 128;

void check_problem(const Fc2Problem& p) {
  const Family f = p.family;
  require(p.hidden > 0 && p.hidden % 64 == 0, "hidden", "must be a positive multiple of 64");
  require(p.intermediate > 0 && p.intermediate % 64 == 0, "intermediate",
          "must be a positive multiple of 64");
  require(p.num_experts > 0, "num_experts", "must be > 0");
  require(p.gemm2_input != nullptr, "gemm2_input", "is required");
  require(p.gemm2_weights != nullptr, "gemm2_weights", "is required");
  require(p.gemm2_output != nullptr, "gemm2_output", "is required");
  if (has_weight_block_scales(f)) {
    require(p.gemm2_input_scale != nullptr, "gemm2_input_scale", "is required");
    require(p.gemm2_weights_scale != nullptr, "gemm2_weights_scale", "is required");
  }
  if (has_output_scalars(f)) {
    require(p.output2_scale_scalar != nullptr, "output2_scale_scalar", "is required");
  }
  if (f == Family::kNVFP4BF16Tok) {
    require(p.per_token_scale != nullptr, "per_token_scale", "is required");
  }
}

}  // namespace

void fc2(const Fc2Problem& p) {
  check_problem(p);
  const ExpertRows groups = group_rows_by_expert(p.tables, p.num_experts, p.rows);
  const int64_t hidden = p.hidden, inter = p.intermediate;

  // FC2 input of every valid row in accumulator units.
  ActivationMatrix in;
  in.family = p.family;
  in.data = p.gemm2_input;
  in.scale = p.gemm2_input_scale;
  in.scale_layout = p.input_scale_layout;
  in.cols = inter;
  std::vector<int64_t> valid;
  for (const auto& rows : groups.rows) valid.insert(valid.end(), rows.begin(), rows.end());
  std::vector<float> x(static_cast<size_t>(p.rows * inter));
  core::parallel_for(static_cast<int64_t>(valid.size()),
                     [&](int64_t i) { load_activation_row(in, valid[i], &x[valid[i] * inter]); });

  WeightMatrix w;
  w.family = p.family;
  w.data = p.gemm2_weights;
  w.scale = p.gemm2_weights_scale;
  w.num_experts = p.num_experts;
  w.rows = hidden;
  w.cols = inter;

  // One task per (expert with rows, block of 128 output columns).
  const int64_t blocks = (hidden + kBlockRows - 1) / kBlockRows;
  std::vector<int64_t> active;
  for (int64_t e = 0; e < p.num_experts; ++e) {
    if (!groups.rows[e].empty()) active.push_back(e);
  }
  core::parallel_for(static_cast<int64_t>(active.size()) * blocks, [&](int64_t task) {
    const int64_t e = active[task / blocks], block = task % blocks;
    const int64_t h0 = block * kBlockRows, n = std::min(kBlockRows, hidden - h0);
    const std::vector<int64_t>& rows = groups.rows[e];
    const int64_t m = static_cast<int64_t>(rows.size());

    std::vector<float> wt(static_cast<size_t>(n * inter));
    int64_t slot[kBlockRows];
    for (int64_t j = 0; j < n; ++j) slot[j] = formats::w2_logical_row(h0 + j) - h0;
    load_weight_rows(w, e, h0, n, slot, wt.data());
    std::vector<const float*> a_rows(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) a_rows[i] = &x[rows[i] * inter];
    std::vector<float> acc(static_cast<size_t>(m * n));
    rows_dot(a_rows.data(), m, wt.data(), n, inter, acc.data(), n);

    const float expert_scale = has_output_scalars(p.family) ? p.output2_scale_scalar[e] : 1.0f;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = rows[i];
      // NOTE: spec §7.1: nvfp4_bf16tok s = output2_scale_scalar[e] * per_token_scale[row].
      const float s =
          p.family == Family::kNVFP4BF16Tok ? expert_scale * p.per_token_scale[row] : expert_scale;
      uint16_t* out = p.gemm2_output + row * hidden + h0;
      for (int64_t j = 0; j < n; ++j) out[j] = formats::bf16_from_float(acc[i * n + j] * s);
    }
  });
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
