// CPU reference of the StepFun activation preparation (spec stepfun §4.2, §4.3) and the reader of
// activation operands (FC1 hidden_states, FC2 gemm2_input) in accumulator units.
#pragma once

#include <cstdint>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

using ::cakemoe::stepfun::Family;
using ::cakemoe::stepfun::SfLayout;
using ::cakemoe::stepfun::StepFunActivations;

/// Validates hidden (bf16 [T, H], contiguous, T > 0, H a positive multiple of the family block)
/// and a_gs (> 0 and finite for fp8 and nvfp4). Does not look at the device.
void check_activation_inputs(Family family, const TensorView& hidden,
                             double hidden_states_scale_global);

/// Quantizes CPU bf16 hidden states [T, H] into the family's input format:
///   nvfp4: e2m1x2 [T, H/2] + linear e4m3 SF [T, H/16] with global a_gs;
///   nvfp4_bf16tok: same layout, per_token_scale[t] = rowAmax * (1/2688) (decode), blocks encoded
///                  with 1/per_token_scale[t] (zero rows: zeros);
///   mxfp8: e4m3 [T, H] + linear ue8m0 SF [T, H/32]; fp8: e4m3(x * a_gs) [T, H]; bf16: a copy.
StepFunActivations prepare_activations(Family family, const TensorView& hidden,
                                       double hidden_states_scale_global);

/// An activation operand: the FC1 input or the FC2 input of a family (spec §4.2). The FC2 input
/// of nvfp4_bf16tok is the requant output, i.e. the nvfp4 format.
struct ActivationMatrix {
  Family family = Family::kNVFP4;
  const void* data = nullptr;      ///< e2m1x2 [rows, cols/2] | e4m3 / bf16 [rows, cols]
  const uint8_t* scale = nullptr;  ///< e4m3 (nvfp4*) / ue8m0 (mxfp8) block scales
  SfLayout scale_layout = SfLayout::kLinear;
  int64_t cols = 0;  ///< K of the GEMM reading it
};

/// Row `row` in accumulator units (spec §5.2): nvfp4* e2m1*sf (no global or per-token scale),
/// fp8 e4m3, mxfp8 e4m3*2^(sf-127), bf16 as is. Exact in fp32. out: [cols].
void load_activation_row(const ActivationMatrix& a, int64_t row, float* out);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
