// Argument validation of every StepFun entry point (spec §9.3). Each function checks everything
// before anything is written and returns the dimensions it derived.
#pragma once

#include <cstdint>
#include <string>

#include "cakemoe/stepfun.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace stepfun {

/// Dimensions shared by the GEMM stages, derived from the weight views (spec §4.2).
struct GemmDims {
  int64_t num_local_experts = 0;  ///< E_loc
  int64_t hidden = 0;             ///< H
  int64_t intermediate = 0;       ///< I
};

struct RoutingDims {
  int64_t num_tokens = 0;
  bool logits_input = true;
  bool logits_fp32 = false;
  bool weights_fp32 = false;  ///< precomputed weights dtype
  Device device;
};

/// (E_loc, H, I) of a physical W1 (is_w1) or W2 view of `family`, with its dtype, shape, device
/// and the bounds of stepfun.h checked; errors name gemm1_weights / gemm2_weights.
GemmDims weight_dims(Family family, const TensorView& weights, bool is_w1, Device device);

RoutingDims validate_routing(const RoutingArgs& args);
GemmDims validate_fc1(const Fc1Args& args);
/// Returns the number of rows of the requant input.
int64_t validate_requant(const RequantArgs& args);
GemmDims validate_fc2(const Fc2Args& args);
/// Returns H.
int64_t validate_finalize(const FinalizeArgs& args);

/// Table sizes of spec §2.5 for the expert count given (routing: global E; GEMM stages: E_loc);
/// InvalidArgument("tile_tokens_dim") unless max_padded + 1 fits in int32.
struct TableSizes {
  int64_t max_ctas = 0;
  int64_t max_padded = 0;
};
TableSizes table_sizes(int64_t num_tokens, int64_t top_k, int64_t local_num_experts, int64_t tile);

/// Bytes of the FC1-output / requant-output scale buffer in `layout` (nvfp4: I/16, mxfp8: I/32
/// cols); InvalidArgument(arg) when the size overflows.
int64_t act_scale_bytes(Family family, SfLayout layout, int64_t rows, int64_t intermediate,
                        const std::string& arg = "gemm1_output_scale");

/// Layout of the FC1-output / FC2-input activation scales at `tile` (spec §8: r8c4 for tiles
/// <= 64, r128c4 above).
SfLayout act_sf_layout(int64_t tile);

}  // namespace stepfun
}  // namespace cakemoe
