// CPU reference of StepFun FC1 (spec stepfun §5): gathered rows x W1[e]^T with fp32 accumulation
// of the family's accumulator-unit operands, the fused SwiGLUStep epilogue and the family's
// FC2-input quantization. Reads the physical weight layout of spec §4.2 / §4.4.
#pragma once

#include <cstdint>

#include "cakemoe/stepfun.h"
#include "reference/stepfun/gemm_common.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

using ::cakemoe::stepfun::Family;
using ::cakemoe::stepfun::SfLayout;

/// Everything FC1 reads and writes (caller-owned buffers, shapes of spec §4.2).
struct Fc1Problem {
  Family family = Family::kNVFP4;
  int64_t num_tokens = 0;                            ///< T: rows of hidden_states
  int64_t hidden = 0;                                ///< H (multiple of 64)
  int64_t intermediate = 0;                          ///< I (multiple of 64)
  int64_t num_experts = 0;                           ///< E_loc
  const void* hidden_states = nullptr;               ///< e2m1x2 [T, H/2] | e4m3 / bf16 [T, H]
  const uint8_t* hidden_states_scale = nullptr;      ///< linear e4m3 [T, H/16] | ue8m0 [T, H/32]
  const float* per_token_scale = nullptr;            ///< nvfp4_bf16tok: [>= T] decode scales
  const void* gemm1_weights = nullptr;               ///< physical W1 view
  const uint8_t* gemm1_weights_scale = nullptr;      ///< 128x4 block scales (nvfp4*, mxfp8)
  const float* output1_scale_scalar = nullptr;       ///< sc [E_loc] (nvfp4*, fp8)
  const float* output1_scale_gate_scalar = nullptr;  ///< sg [E_loc] (nvfp4*, fp8)
  const float* gemm1_clamp_limit = nullptr;          ///< cl [E_loc], family units (spec §3.2)
  GemmTables tables;
  void* gemm1_output = nullptr;           ///< e2m1x2 [rows, I/2] | e4m3 / bf16 [rows, I]
  uint8_t* gemm1_output_scale = nullptr;  ///< nvfp4: e4m3, mxfp8: ue8m0, in the layout below
  SfLayout output_scale_layout = SfLayout::kR8C4;
  int64_t output_rows = 0;  ///< rows of gemm1_output (max_padded)
};

/// Runs FC1. Only valid rows (and their scale bytes) are written; padded rows stay untouched.
/// Throws InvalidArgument, before writing, for missing operands, sizes that are not multiples
/// of 64, or tables that point outside the buffers (a token index outside [-1, T); a -1 token
/// in a valid row reads as a zero activation row).
void fc1(const Fc1Problem& problem);

/// The accurate fp32 sigmoid of the reference epilogue: 1 / (1 + exp(-x)).
float sigmoid_fp32(float x);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
