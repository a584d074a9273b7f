// Readers of a prepared StepFun weight view (spec stepfun §4.2, §5.2): one GEMM's physical
// weights, its rows in accumulator units, and the logical dequantized weights of one expert.
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "formats/quantize.h"
#include "reference/stepfun/unpack.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

WeightMatrix gemm1_matrix(const StepFunWeights& v, const WeightDims& d) {
  WeightMatrix m;
  m.family = v.family;
  m.data = v.gemm1_weights.data();
  m.scale = v.gemm1_weights_scale.defined() ? v.gemm1_weights_scale.ptr<uint8_t>() : nullptr;
  m.num_experts = d.num_experts;
  m.rows = 2 * d.intermediate;
  m.cols = d.hidden;
  return m;
}

WeightMatrix gemm2_matrix(const StepFunWeights& v, const WeightDims& d) {
  WeightMatrix m;
  m.family = v.family;
  m.data = v.gemm2_weights.data();
  m.scale = v.gemm2_weights_scale.defined() ? v.gemm2_weights_scale.ptr<uint8_t>() : nullptr;
  m.num_experts = d.num_experts;
  m.rows = d.hidden;
  m.cols = d.intermediate;
  return m;
}

void load_weight_row(const WeightMatrix& w, int64_t expert, int64_t row, float* out) {
  const int64_t cols = w.cols;
  const float* e4m3 = e4m3_table();
  if (is_nvfp4_family(w.family)) {
    const int64_t num_sf_cols = cols / formats::kNvfp4Block;
    const auto* packed = static_cast<const uint8_t*>(w.data) + (expert * w.rows + row) * cols / 2;
    const uint8_t* sf = w.scale + expert * formats::sf_size_128x4(w.rows, num_sf_cols);
    const float* e2m1 = e2m1_table();
    for (int64_t c = 0; c < num_sf_cols; ++c) {
      unpack_nvfp4_block16(packed + c * 8, e4m3[sf[formats::sf_offset_128x4(row, c, num_sf_cols)]],
                           e2m1, out + c * formats::kNvfp4Block);
    }
  } else if (w.family == Family::kFP8 || w.family == Family::kMXFP8) {
    const auto* q = static_cast<const uint8_t*>(w.data) + (expert * w.rows + row) * cols;
    for (int64_t k = 0; k < cols; ++k) out[k] = e4m3[q[k]];
    if (w.family == Family::kMXFP8) {
      const int64_t num_sf_cols = cols / formats::kMxfp8Block;
      const uint8_t* sf = w.scale + expert * formats::sf_size_128x4(w.rows, num_sf_cols);
      for (int64_t c = 0; c < num_sf_cols; ++c) {
        const float s = formats::ue8m0_to_float(sf[formats::sf_offset_128x4(row, c, num_sf_cols)]);
        for (int64_t k = c * formats::kMxfp8Block; k < (c + 1) * formats::kMxfp8Block; ++k) {
          out[k] *= s;
        }
      }
    }
  } else {
    const auto* base = static_cast<const uint16_t*>(w.data) + expert * w.rows * cols;
    for (int64_t kb = 0; kb < cols / formats::kBlockMajorK; ++kb) {
      const uint16_t* src =
          base + formats::block_major_k_offset(row, kb * formats::kBlockMajorK, w.rows);
      for (int64_t i = 0; i < formats::kBlockMajorK; ++i) {
        out[kb * formats::kBlockMajorK + i] = formats::bf16_to_float(src[i]);
      }
    }
  }
}

void load_weight_rows(const WeightMatrix& w, int64_t expert, int64_t row0, int64_t n,
                      const int64_t* dst, float* out) {
  if (w.family != Family::kBF16) {
    for (int64_t j = 0; j < n; ++j) load_weight_row(w, expert, row0 + j, out + dst[j] * w.cols);
    return;
  }
  // NOTE: spec §4.4 (d): rows of one 64-wide K block are contiguous ([K/64, M, 64] per expert).
  const auto* base = static_cast<const uint16_t*>(w.data) + expert * w.rows * w.cols;
  for (int64_t kb = 0; kb < w.cols / formats::kBlockMajorK; ++kb) {
    const uint16_t* src = base + (kb * w.rows + row0) * formats::kBlockMajorK;
    for (int64_t j = 0; j < n; ++j) {
      float* o = out + dst[j] * w.cols + kb * formats::kBlockMajorK;
      for (int64_t i = 0; i < formats::kBlockMajorK; ++i) {
        o[i] = formats::bf16_to_float(src[j * formats::kBlockMajorK + i]);
      }
    }
  }
}

namespace {

using core::require;

std::vector<float> dequantize_expert(const PreparedWeights& w, const WeightMatrix& m,
                                     const std::vector<float>& globals,
                                     const std::vector<int64_t>& dst_row_of, int64_t expert) {
  require(expert >= 0 && expert < m.num_experts, "expert",
          "must lie in [0, " + std::to_string(m.num_experts) + ")");
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  const float decode = has_output_scalars(w.view.family) ? 1.0f / globals[expert] : 1.0f;
  for (int64_t r = 0; r < m.rows; ++r) {
    float* row = out.data() + r * m.cols;
    load_weight_row(m, expert, dst_row_of[r], row);
    if (has_output_scalars(w.view.family)) {
      for (int64_t k = 0; k < m.cols; ++k) row[k] = formats::mul_rn(row[k], decode);
    }
  }
  return out;
}

}  // namespace

std::vector<float> dequantize_w1(const PreparedWeights& w, int64_t expert) {
  return dequantize_expert(w, gemm1_matrix(w.view, w.dims), w.w1_global,
                           formats::w1_row_map(w.dims.intermediate), expert);
}

std::vector<float> dequantize_w2(const PreparedWeights& w, int64_t expert) {
  return dequantize_expert(w, gemm2_matrix(w.view, w.dims), w.w2_global,
                           formats::w2_row_map(w.dims.hidden), expert);
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
