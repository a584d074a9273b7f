// CPU reference engine of BGMV MoE-LoRA (spec bgmv §2, §3.2): shrink + expand in the canonical
// FP32 order, bit for bit what the GPU kernels must produce, plus an fp64 oracle for tolerances.
#pragma once

#include <cstdint>
#include <vector>

#include "cakemoe/dtype.h"

namespace cakemoe {
namespace reference {
namespace bgmv {

/// Host operands of one problem. Weights and x hold raw 16-bit bf16/fp16 patterns.
struct Problem {
  DType dtype = DType::kBF16;                 ///< kBF16 or kFP16 (x, LoRA weights, shrink_out)
  int64_t num_tokens = 0;                     ///< T
  int64_t hidden = 0;                         ///< H
  int64_t rank = 0;                           ///< R
  int64_t feat_out = 0;                       ///< F (equal across slices)
  int64_t num_pairs = 0;                      ///< P
  int64_t num_loras = 0;                      ///< L
  int64_t num_experts = 0;                    ///< E
  const uint16_t* x = nullptr;                ///< [T, H] contiguous
  std::vector<const uint16_t*> lora_a;        ///< per slice [L, E, R, H] contiguous
  std::vector<const uint16_t*> lora_b;        ///< per slice [L, E, F, R] contiguous
  const int64_t* sorted_token_ids = nullptr;  ///< [P]; outside [0, T) = padding
  const int64_t* expert_ids = nullptr;        ///< [P] in [0, E)
  const int64_t* lora_indices = nullptr;      ///< [T] in [-1, L)
  const float* topk_weights = nullptr;        ///< [P]

  int64_t num_slices() const { return static_cast<int64_t>(lora_a.size()); }
};

/// Parameters of the canonical order that change bits (spec §3.2 caveat).
struct CanonicalParams {
  int shrink_splits = 1;  ///< hidden splits of the shrink (spec §4.2), >= 1
  bool grouped = false;   ///< grouped pipeline order (spec §5): weight applied in the combine
};

// ---- Canonical FP32 engine ----------------------------------------------------------------------

/// shrink_out [S, P, R]: RN-rounded canonical shrink rows; padding / no-LoRA rows are +0.
void shrink(const Problem& problem, const CanonicalParams& params, uint16_t* shrink_out);
/// y [T, S*F] with row stride `y_row_stride` (elements): every element of the view is written
/// once (overwrite); columns outside [0, S*F) of each row are never touched.
void expand(const Problem& problem, const CanonicalParams& params, const uint16_t* shrink_out,
            float* y, int64_t y_row_stride);
/// shrink then expand.
void run(const Problem& problem, const CanonicalParams& params, uint16_t* shrink_out, float* y,
         int64_t y_row_stride);

/// One canonical shrink dot before rounding (spec §3.2): 128 threads x 8 consecutive K elements
/// per 1024-wide tile, per-thread fma chains over the split's tiles, warp XOR butterflies, warp
/// sums in order from 0.0f, split partials in order from 0.0f.
float shrink_dot(const float* x, const float* a, int64_t hidden, int splits);
/// XOR butterfly (offsets n/2 .. 1, v[i] = v[i] + v[i^off] on every lane) over `n` lanes, n a
/// power of two; returns lane 0. `lanes` is overwritten.
float butterfly_sum(float* lanes, int n);
/// Rank groups of the expand: ceil(R / 8) (the last one short when R % 8 != 0).
int64_t expand_groups(int64_t rank);

/// Pairs of each token in ascending pair index (padding pairs dropped): CSR offsets [T + 1] and
/// pair ids.
struct TokenRoutes {
  std::vector<int64_t> offsets;
  std::vector<int64_t> pairs;
};
TokenRoutes token_routes(const Problem& problem);

// ---- fp64 oracle
// ---------------------------------------------------------------------------------

/// Shrink rows [S, P, R] in double; `round_shrink` rounds each to the weight dtype (RNE).
std::vector<double> oracle_shrink(const Problem& problem, bool round_shrink);
/// y [T, S*F] in double math from exactly dequantized operands.
std::vector<double> oracle_y(const Problem& problem, bool round_shrink);
/// Row t of oracle_y.
std::vector<double> oracle_y_row(const Problem& problem, int64_t token, bool round_shrink);

/// Widening and RNE narrowing of the 16-bit weight types.
float widen(DType dtype, uint16_t bits);
uint16_t narrow(DType dtype, float value);
/// Correctly rounded double -> bf16/fp16 value (no double rounding), returned as double.
double round_to_dtype(DType dtype, double value);

}  // namespace bgmv
}  // namespace reference
}  // namespace cakemoe
