// CPU reference of the StepFun finalize (spec stepfun §7.2, §7.3): weighted sum of the expanded
// FC2 rows of every token, fp32 fused multiply-adds in k order, one bf16 rounding.
#pragma once

#include <cstdint>

#include "cakemoe/dtype.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

struct FinalizeShape {
  int64_t num_tokens = 0;   ///< T
  int64_t top_k = 0;        ///< K
  int64_t hidden = 0;       ///< H
  int64_t gemm2_rows = 0;   ///< rows of gemm2_output that may be read (slots must be below)
};

/// output[t, h] = bf16_rn(acc), acc = fma(w[t,k], gemm2_output[p, h], acc) over k = 0..K-1 in
/// order, starting from +0 and skipping p = expanded_idx_to_permuted_idx[t*K+k] == -1.
/// gemm2_output bf16 [gemm2_rows, H]; expert_weights [T, K] of `weights_dtype` (kBF16 bits or
/// kFP32); output bf16 [T, H]. Throws InvalidArgument, before writing, for a slot outside
/// [-1, gemm2_rows).
void finalize(const FinalizeShape& shape, const uint16_t* gemm2_output, const void* expert_weights,
              DType weights_dtype, const int32_t* expanded_idx_to_permuted_idx, uint16_t* output);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
