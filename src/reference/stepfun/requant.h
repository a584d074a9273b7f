// CPU reference of the StepFun per-token NVFP4 requantization (spec stepfun §6, nvfp4_bf16tok):
// bf16 FC1 rows -> packed e2m1 + e4m3 block scales (in an SF layout) + fp32 per-row decode scale.
#pragma once

#include <cstdint>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

/// Default global_scale_inv of spec §6: 1 / (448 * 6).
constexpr double kRequantGlobalScaleInv = 1.0 / 2688.0;

/// Requantizes every row reached through expanded_idx_to_permuted_idx (entries -1 skipped, each
/// row once); other rows of the outputs are left untouched. Per visited row r:
///   p = rowAmax(x[r]) * float(global_scale_inv) -> out_per_token_scale[r];
///   enc = rcp_rn(p); 16-blocks by formats::nvfp4_quantize_block16(enc); p == 0 -> zeros.
/// x_bf16 [rows, I]; out_packed [rows, I/2]; out_sf sf_size(layout, rows, I/16) bytes;
/// out_per_token_scale [rows]. Throws InvalidArgument, before writing, unless I > 0,
/// I % 16 == 0 and every entry lies in [-1, rows).
void requant_nvfp4_per_token(const uint16_t* x_bf16, int64_t rows, int64_t I,
                             const int32_t* expanded_idx_to_permuted_idx, int64_t num_expanded,
                             cakemoe::stepfun::SfLayout layout, double global_scale_inv,
                             uint8_t* out_packed, uint8_t* out_sf, float* out_per_token_scale);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
