// CPU reference of the StepFun weight preparation (spec stepfun §3.2, §4.3, §4.4, §9.4): logical
// bf16 W1 [E, 2I, H] (rows [up; gate]) and W2 [E, H, I] -> a family's physical (trtllm-gen) view,
// the per-expert scalars and gemm1_clamp_limit in family units; plus the readers of the physical
// view (accumulator units for the GEMMs, logical dequantized floats for tests and the oracle).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

using ::cakemoe::stepfun::Family;
using ::cakemoe::stepfun::SfLayout;
using ::cakemoe::stepfun::StepFunWeights;
using ::cakemoe::stepfun::WeightPrepOptions;

/// Global encode constants: e2m1 max * e4m3 max (NVFP4) and e4m3 max (FP8), spec §4.1.
constexpr float kNvfp4GlobalMax = 2688.0f;
constexpr float kFp8GlobalMax = 448.0f;
/// SwiGLUStep limit used when WeightPrepOptions::step_limits is empty (SwiGLUStep(limit=7.0)).
constexpr float kDefaultStepLimit = 7.0f;

bool is_nvfp4_family(Family family);          ///< nvfp4, nvfp4_bf16tok
bool has_output_scalars(Family family);       ///< nvfp4, nvfp4_bf16tok, fp8 (spec §4.2)
bool has_weight_block_scales(Family family);  ///< nvfp4*, mxfp8
/// Elements per weight / activation block scale: 16 (nvfp4*), 32 (mxfp8), 0 otherwise.
int64_t block_size(Family family);

/// Sizes derived from validated inputs.
struct WeightDims {
  int64_t num_experts = 0;   ///< E_loc (experts prepared)
  int64_t hidden = 0;        ///< H
  int64_t intermediate = 0;  ///< I
};

/// Validates w1 / w2 / options (dtype, shapes, H and I multiples of 64, expert range, limits,
/// a_gs for fp8 and nvfp4, c_gs >= 0). Does not look at the device. Throws InvalidArgument.
WeightDims check_weight_inputs(const TensorView& w1, const TensorView& w2,
                               const WeightPrepOptions& options);

/// A prepared weight set: the public view plus what the oracle and tests need to decode it.
struct PreparedWeights {
  StepFunWeights view;
  WeightDims dims;
  std::vector<float> w1_global;    ///< per-expert encode scale of W1 (nvfp4*, fp8), else empty
  std::vector<float> w2_global;    ///< per-expert encode scale of W2 (nvfp4*, fp8), else empty
  std::vector<float> step_limits;  ///< L_e in physical units, [E_loc]
};

/// Prepares CPU bf16 weights (spec §4.3/§4.4). Shapes of the view:
///   nvfp4*: gemm1_weights e2m1x2 [E, 2I, H/2], gemm1_weights_scale e4m3
///           [E, pad128(2I), pad4(H/16)] (128x4 bytes); W2 likewise over [E, H, I].
///   fp8:    e4m3 [E, 2I, H] / [E, H, I].
///   mxfp8:  e4m3 as fp8 + ue8m0 [E, pad128(rows), pad4(K/32)] 128x4 bytes.
///   bf16:   BlockMajorK [E, H/64, 2I, 64] / [E, I/64, H, 64].
/// Scalars fp32 [E] (nvfp4*, fp8 only); gemm1_clamp_limit fp32 [E] in family units (§3.2).
PreparedWeights prepare_weights(const TensorView& w1, const TensorView& w2,
                                const WeightPrepOptions& options);

/// Re-derives output1_scale_scalar and output2_scale_scalar for a new c_gs (nvfp4, fp8), e.g.
/// after calibrating it with the oracle. Other families ignore the call.
void set_intermediate_scale(PreparedWeights* weights, double intermediate_scale_global);

/// Default c_gs of spec §12.7 / §4.3 open point: 448/L^2 (fp8), 2688/L^2 (nvfp4), L = max limit;
/// 0 for families without an FC2-input global scale.
double default_intermediate_scale(Family family, const std::vector<float>& step_limits);

/// The eight tensors of a weight view (gemm1/gemm2 weights, their block scales, the per-expert
/// scalars, gemm1_clamp_limit), e.g. to move them all to another device.
std::array<Tensor*, 8> weight_tensors(StepFunWeights* weights);

/// Points the eight weight operands of `args` (gemm1/gemm2 weights, their block scales, the
/// per-expert scalars, gemm1_clamp_limit) at the tensors of `weights`.
void set_weight_args(::cakemoe::stepfun::MoeArgs* args, const StepFunWeights& weights);

// ---- Readers of a physical weight view (weight_readers.cpp) -------------------------------------

/// One GEMM's physical weights for all local experts: W1 (gated rows) or W2.
struct WeightMatrix {
  Family family = Family::kNVFP4;
  const void* data = nullptr;      ///< the physical view of spec §4.2
  const uint8_t* scale = nullptr;  ///< 128x4-swizzled block scales (nvfp4*, mxfp8)
  int64_t num_experts = 0;
  int64_t rows = 0;  ///< 2I (W1) or H (W2)
  int64_t cols = 0;  ///< K: H (W1) or I (W2)
};

WeightMatrix gemm1_matrix(const StepFunWeights& view, const WeightDims& dims);
WeightMatrix gemm2_matrix(const StepFunWeights& view, const WeightDims& dims);

/// Physical row `row` of expert `expert` in accumulator units (spec §5.2): nvfp4* e2m1*sf,
/// fp8 e4m3, mxfp8 e4m3*2^(sf-127), bf16 as is. Every value is exact in fp32. out: [cols].
void load_weight_row(const WeightMatrix& w, int64_t expert, int64_t row, float* out);

/// Physical rows [row0, row0 + n) of one expert, physical row row0 + j into out + dst[j] * cols.
/// Same values as load_weight_row; reads BlockMajorK (bf16) in memory order.
void load_weight_rows(const WeightMatrix& w, int64_t expert, int64_t row0, int64_t n,
                      const int64_t* dst, float* out);

/// Inverse of the preparation: logical dequantized weights of one expert (raw * (1/w_gs) in fp32
/// for nvfp4* and fp8), W1 as [2I, H] with rows [up; gate], W2 as [H, I].
std::vector<float> dequantize_w1(const PreparedWeights& weights, int64_t expert);
std::vector<float> dequantize_w2(const PreparedWeights& weights, int64_t expert);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
