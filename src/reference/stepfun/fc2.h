// CPU reference of StepFun FC2 (spec stepfun §7.1): FC1 output (in its family format and scale
// layout) x W2[e]^T, fp32 accumulation, gemm2_output[row, h] = bf16_rn(acc * s).
#pragma once

#include <cstdint>

#include "cakemoe/stepfun.h"
#include "reference/stepfun/gemm_common.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

using ::cakemoe::stepfun::Family;
using ::cakemoe::stepfun::SfLayout;

/// Everything FC2 reads and writes (caller-owned buffers, shapes of spec §4.2).
struct Fc2Problem {
  Family family = Family::kNVFP4;
  int64_t hidden = 0;                          ///< H (multiple of 64)
  int64_t intermediate = 0;                    ///< I (multiple of 64; no K-tile restriction)
  int64_t num_experts = 0;                     ///< E_loc
  const void* gemm2_input = nullptr;           ///< e2m1x2 [rows, I/2] | e4m3 / bf16 [rows, I]
  const uint8_t* gemm2_input_scale = nullptr;  ///< nvfp4*: e4m3, mxfp8: ue8m0 block scales
  SfLayout input_scale_layout = SfLayout::kR8C4;
  const float* per_token_scale = nullptr;  ///< nvfp4_bf16tok: [>= rows], per permuted row
  const void* gemm2_weights = nullptr;     ///< physical W2 view
  const uint8_t* gemm2_weights_scale = nullptr;
  const float* output2_scale_scalar = nullptr;  ///< [E_loc] (nvfp4*, fp8)
  GemmTables tables;                            ///< permuted_idx_to_token_idx is not read
  uint16_t* gemm2_output = nullptr;             ///< bf16 [rows, H]
  int64_t rows = 0;                             ///< rows of gemm2_input / gemm2_output
};

/// Runs FC2 with s = output2_scale_scalar[e] (nvfp4, fp8), output2_scale_scalar[e] *
/// per_token_scale[row] (nvfp4_bf16tok), 1 (bf16, mxfp8). Only valid rows are written.
/// Throws InvalidArgument, before writing, for missing operands or inconsistent tables.
void fc2(const Fc2Problem& problem);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
