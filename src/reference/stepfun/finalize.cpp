#include "reference/stepfun/finalize.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "formats/codecs.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

using formats::bf16_from_float;
using formats::bf16_to_float;

void finalize(const FinalizeShape& shape, const uint16_t* gemm2_output, const void* expert_weights,
              DType weights_dtype, const int32_t* expanded_idx_to_permuted_idx, uint16_t* output) {
  core::require(weights_dtype == DType::kBF16 || weights_dtype == DType::kFP32, "expert_weights",
                "dtype must be bf16 or fp32");
  const int64_t num_expanded = shape.num_tokens * shape.top_k;
  for (int64_t i = 0; i < num_expanded; ++i) {
    const int32_t p = expanded_idx_to_permuted_idx[i];
    core::require(p >= -1 && p < shape.gemm2_rows, "expanded_idx_to_permuted_idx",
                  "entry " + std::to_string(i) + " = " + std::to_string(p) +
                      " must be -1 or lie in [0, " + std::to_string(shape.gemm2_rows) + ")");
  }

  const int64_t hidden = shape.hidden;
  const int64_t top_k = shape.top_k;
  core::parallel_for(shape.num_tokens, [&](int64_t t) {
    std::vector<float> acc(static_cast<size_t>(hidden), 0.0f);
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t i = t * top_k + k;
      const int32_t p = expanded_idx_to_permuted_idx[i];
      if (p == -1) continue;
      const float w = weights_dtype == DType::kBF16
                          ? bf16_to_float(static_cast<const uint16_t*>(expert_weights)[i])
                          : static_cast<const float*>(expert_weights)[i];
      const uint16_t* row = gemm2_output + static_cast<int64_t>(p) * hidden;
      // NOTE: spec §7.2 "fused multiply-add allowed": cakemoe defines it as one fp32 fma
      // (single rounding); the GPU finalize must use fmaf in the same k order.
      for (int64_t h = 0; h < hidden; ++h) acc[h] = std::fma(w, bf16_to_float(row[h]), acc[h]);
    }
    uint16_t* out = output + t * hidden;
    for (int64_t h = 0; h < hidden; ++h) out[h] = bf16_from_float(acc[h]);
  });
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
