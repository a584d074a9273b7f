// fp64 oracle of the StepFun MoE layer (spec stepfun §10.1): exact dequantization of the prepared
// operands, fp64 GEMMs, fp64 SwiGLUStep with the physical limits, emulation of the family's
// FC2-input quantization with the scales of the prepared weights, fp64 finalize.
// Independent of the routing tables: it loops over the (token, k) pairs.
#pragma once

#include <cstdint>
#include <vector>

#include "cakemoe/stepfun.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

using ::cakemoe::stepfun::StepFunActivations;

struct OracleProblem {
  const PreparedWeights* weights = nullptr;         ///< family, view, encode scales, limits
  const StepFunActivations* activations = nullptr;  ///< prepare_activations() of the same family
  const int32_t* topk_ids = nullptr;                ///< [T*K] global expert ids
  const float* topk_weights = nullptr;              ///< [T*K] router weights
  int64_t num_tokens = 0;                           ///< T
  int64_t top_k = 0;                                ///< K
  int64_t local_expert_offset = 0;                  ///< off: (t,k) local iff id-off in [0,E_loc)
};

struct OracleResult {
  std::vector<double> output;  ///< [T, H] finalized layer output
  /// [T*K, I] SwiGLUStep output of each pair before the FC2-input quantization (physical units;
  /// rows of non-local pairs are 0).
  std::vector<double> activation;
  std::vector<bool> local;  ///< [T*K] pair is routed to a local expert
};

/// The full fp64 layer. Throws InvalidArgument for missing inputs or mismatched sizes.
OracleResult oracle_moe(const OracleProblem& problem);

/// FC2-input encode scale calibrated on the oracle's activation: 2688/amax (nvfp4), 448/amax
/// (fp8), 0 for the other families (or when amax == 0). The FC2 part of the oracle is skipped.
double calibrate_intermediate_scale(const OracleProblem& problem);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
