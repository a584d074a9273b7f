#include "reference/stepfun/requant.h"

#include <string>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "formats/quantize.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

void requant_nvfp4_per_token(const uint16_t* x_bf16, int64_t rows, int64_t I,
                             const int32_t* expanded_idx_to_permuted_idx, int64_t num_expanded,
                             cakemoe::stepfun::SfLayout layout, double global_scale_inv,
                             uint8_t* out_packed, uint8_t* out_sf, float* out_per_token_scale) {
  constexpr int64_t kBlock = formats::kNvfp4Block;
  core::require(I > 0 && I % kBlock == 0, "gemm1_output",
                "columns I = " + std::to_string(I) + " must be a positive multiple of 16");
  core::require(rows >= 0, "gemm1_output", "rows must be >= 0");

  // Rows to visit: each slot reached through e2p, once, in first-reach order.
  std::vector<char> seen(static_cast<size_t>(rows), 0);
  std::vector<int64_t> visit;
  for (int64_t i = 0; i < num_expanded; ++i) {
    const int32_t p = expanded_idx_to_permuted_idx[i];
    core::require(p >= -1 && p < rows, "expanded_idx_to_permuted_idx",
                  "entry " + std::to_string(i) + " = " + std::to_string(p) +
                      " must be -1 or lie in [0, " + std::to_string(rows) + ")");
    if (p >= 0 && !seen[p]) {
      seen[p] = 1;
      visit.push_back(p);
    }
  }

  const int64_t num_sf_cols = I / kBlock;
  const float scale_inv = static_cast<float>(global_scale_inv);
  core::parallel_for(static_cast<int64_t>(visit.size()), [&](int64_t v) {
    const int64_t r = visit[v];
    std::vector<float> x(static_cast<size_t>(I));
    for (int64_t j = 0; j < I; ++j) x[j] = formats::bf16_to_float(x_bf16[r * I + j]);
    uint8_t* packed = out_packed + r * (I / 2);
    std::vector<uint8_t> sf(static_cast<size_t>(num_sf_cols));
    const float p = formats::nvfp4_per_token_quantize_row(x.data(), I, scale_inv, packed,
                                                          sf.data());
    if (p == 0.0f) {
      // NOTE: spec §6 zero-row guard: enc = rcp(0) = inf; the row is all zero codes and scales.
      for (int64_t j = 0; j < I / 2; ++j) packed[j] = 0;
      for (auto& s : sf) s = 0;
    }
    for (int64_t c = 0; c < num_sf_cols; ++c) {
      out_sf[formats::sf_offset(layout, r, c, num_sf_cols)] = sf[c];
    }
    out_per_token_scale[r] = p;
  });
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
