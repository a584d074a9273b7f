// Layer cases of spec stepfun §10.3 (random data, limits, routing regimes) and the acceptance check
// of a layer output against the fp64 oracle (§10.2). Shared by the tests, the GPU suite and the
// CLI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

enum class LimitMode : uint8_t { k7, k16, kMixed };  ///< all 7, all 16, even 7 / odd 16
enum class RoutingRegime : uint8_t { kUniform, kRagged, kRandperm };
const char* limit_mode_name(LimitMode mode);
const char* routing_regime_name(RoutingRegime regime);

struct LayerCase {
  Family family = Family::kNVFP4;
  int64_t num_tokens = 8;      ///< T
  int64_t hidden = 512;        ///< H
  int64_t intermediate = 256;  ///< I
  int64_t num_experts = 8;     ///< E (global)
  int64_t top_k = 2;           ///< K
  int64_t local_expert_offset = 0;
  int64_t local_num_experts = -1;  ///< -1: all E
  LimitMode limits = LimitMode::kMixed;
  RoutingRegime regime = RoutingRegime::kUniform;
  bool precomputed = false;      ///< UnpackedPrecomputed routing (ids + weights)
  bool precomputed_fp32 = true;  ///< dtype of the precomputed weights
  double routed_scaling_factor = 1.0;
  uint64_t seed = 20261004;  ///< spec §10.3
  std::string describe() const;
};

/// Everything a layer run needs, on the host.
struct LayerData {
  LayerCase config;
  PreparedWeights weights;  ///< c_gs calibrated on the oracle (nvfp4, fp8)
  cakemoe::stepfun::StepFunActivations activations;
  Tensor routing_logits;              ///< bf16 [T, E]
  Tensor topk_ids, topk_weights;      ///< precomputed mode: int32 / bf16|fp32 [T, K]
  std::vector<int32_t> oracle_ids;    ///< [T*K] the routing the layer must follow
  std::vector<float> oracle_weights;  ///< [T*K]
  std::vector<double> oracle_output;  ///< [T, H] fp64 oracle of the layer
};

/// bf16(scale * N(0,1)) of `shape` from `seed`, generated in fixed chunks so the values do not
/// depend on the thread count (the §10.3 data of make_layer).
Tensor normal_bf16(const std::vector<int64_t>& shape, uint64_t seed, float scale);

/// Builds a case with §10.3 data: hidden = 12*randn (bf16), W1 = randn/sqrt(H), W2 = randn/sqrt(I),
/// logits randn (regime-shaped). Deterministic for a given config (multi-threaded generation).
LayerData make_layer(const LayerCase& config);
/// Public-API arguments for the layer (CPU tensors; plan left to default_plan).
cakemoe::stepfun::MoeArgs layer_args(const LayerData& data);

/// Acceptance of spec §10.2 plus our relative Frobenius bar (1e-2 bf16/fp8/mxfp8, 2e-2 nvfp4*).
struct LayerCheck {
  double rel_frobenius = 0;
  double fraction_within = 0;
  double max_abs_error = 0;
  double frobenius_bar = 0;
  double percent_bar = 0;
  int64_t unwritten = 0;  ///< NaN outputs (poison left behind)
  bool pass = false;
  std::string summary() const;
};
/// Compares a bf16 [T, H] output with the fp64 oracle of the same case.
LayerCheck check_layer_output(const LayerData& data, const uint16_t* output_bf16);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
