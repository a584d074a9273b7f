// cakemoe public API: the unified MoE configuration (spec stepfun §9.3, §9.4) and the one entry
// that runs a StepFun layer from it. The configuration mirrors FlashInfer's unified MoE API; every
// option this backend does not implement is rejected with a typed error naming the field and the
// rule (never ignored silently).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "cakemoe/tensor.h"

namespace cakemoe {
namespace stepfun {

/// Router kinds of the unified API. Only kRenormalize is implemented (top-K on the logits, softmax
/// over the K selected, spec §2.2); the others are rejected with Unsupported.
enum class RoutingMethod : uint8_t {
  kDefault,           ///< softmax -> top-K (no renormalisation)
  kRenormalize,       ///< top-K -> softmax over the K (the only one served)
  kDeepSeekV3,        ///< grouped sigmoid + bias
  kLlama4,            ///< top-1 sigmoid
  kRenormalizeNaive,  ///< softmax -> top-K -> divide by the sum
  kTopK,              ///< top-K, no weights transform
};
const char* routing_method_name(RoutingMethod method);

struct RoutingConfig {
  int64_t num_experts = 0;  ///< E (global)
  int64_t top_k = 0;        ///< K
  RoutingMethod method = RoutingMethod::kRenormalize;
  bool use_routing_bias = false;  ///< rejected (selection bias is a DeepSeek/Step router feature)
  TensorView routing_bias;        ///< rejected when given
  int64_t n_group = 0;            ///< 0 or 1: no expert groups (others rejected)
  int64_t topk_group = 0;         ///< 0 or 1: no expert groups (others rejected)
  /// FromLogits: multiplies the router weights (cakemoe deviation 4). UnpackedPrecomputed: must
  /// be absent or 1.0 (bake it into topk_weights).
  std::optional<double> routed_scaling_factor;
};

/// Quantization formats of one GEMM operand.
enum class QuantFormat : uint8_t {
  kBF16,
  kFP8PerTensor,
  kFP8BlockScale,  ///< DeepSeek 128x128 blocks: rejected
  kMXFP8,
  kMXFP4,          ///< rejected
  kNVFP4,
};
const char* quant_format_name(QuantFormat format);

/// The (weights, activations) pair. Served: NVFP4xNVFP4 (per_token_scale selects nvfp4_bf16tok),
/// BF16xBF16, FP8PerTensorxFP8PerTensor, MXFP8xMXFP8.
struct QuantConfig {
  QuantFormat weights = QuantFormat::kNVFP4;
  QuantFormat activations = QuantFormat::kNVFP4;
  bool per_token_scale = false;  ///< NVFP4 only: per-token activation scales (nvfp4_bf16tok)

  static QuantConfig nvfp4(bool per_token = false) {
    return {QuantFormat::kNVFP4, QuantFormat::kNVFP4, per_token};
  }
  static QuantConfig bf16() { return {QuantFormat::kBF16, QuantFormat::kBF16, false}; }
  static QuantConfig fp8_per_tensor() {
    return {QuantFormat::kFP8PerTensor, QuantFormat::kFP8PerTensor, false};
  }
  static QuantConfig mxfp8() { return {QuantFormat::kMXFP8, QuantFormat::kMXFP8, false}; }
};

/// The family a quant pair selects; Unsupported("quant", ...) for any other pair.
Family family_of(const QuantConfig& quant);
/// The quant pair of a family (inverse of family_of).
QuantConfig quant_of(Family family);

struct ExpertConfig {
  int64_t intermediate_size = 0;        ///< I (per expert, after TP)
  int64_t local_expert_offset = 0;      ///< first local expert (global id)
  int64_t local_num_experts = -1;       ///< E_loc; -1: all E
  int64_t num_fused_shared_experts = 0;  ///< rejected unless 0
};

/// Activations of the unified API. Only SwiGLUStep is served (spec §3).
enum class ActivationType : uint8_t {
  kSwiGLUStep,
  kSwiGLU,
  kSwiGLUBias,
  kGeGLU,
  kReLU2,
  kIdentity,
};
const char* activation_name(ActivationType type);

struct Activation {
  ActivationType type = ActivationType::kSwiGLUStep;
  float limit = 7.0f;  ///< SwiGLUStep L (default for every expert; see prepare_weights)
};
/// SwiGLUStep(limit): min(silu(gate), L) * clamp(up, -L, L).
inline Activation swiglu_step(float limit = 7.0f) { return {ActivationType::kSwiGLUStep, limit}; }

/// The backend selector of the unified API.
struct CakeStepFunConfig {
  std::string backend = "cake_stepfun";
  /// Compute capabilities with compiled kernels: 90 (cakemoe deviation 1), 100, 103.
  static bool supported(int compute_capability);
};

enum class RoutingInputMode : uint8_t {
  kFromLogits,           ///< routing_logits [T, E] bf16|fp32
  kUnpackedPrecomputed,  ///< topk_ids [T, K] int32 + topk_weights [T, K] bf16|fp32
  kPackedPrecomputed,    ///< rejected
};

struct ExecutionConfig {
  bool enable_pdl = true;
  /// Upper end of the tuning buckets; must be > 0. cakemoe has no autotuner yet (plans come from
  /// default_plan, spec §8), so the value is validated and otherwise unused.
  int64_t tune_max_num_tokens = 8192;
};

struct MoEFinalizeConfig {
  bool do_finalize = true;
};

struct MoEConfig {
  RoutingConfig routing;
  QuantConfig quant;
  ExpertConfig experts;
  Activation activation;
  CakeStepFunConfig backend;
  RoutingInputMode routing_input = RoutingInputMode::kFromLogits;
  ExecutionConfig execution;
  MoEFinalizeConfig finalize;
  bool lora_deltas = false;  ///< rejected (the LoRA pipeline is cakemoe::bgmv)
};

/// Checks every rule of spec §9.3 that the configuration alone decides and returns its family.
/// Throws InvalidArgument (bad values) or Unsupported (valid elsewhere, not served here); the
/// error's argument() is the field ("routing.method", "quant", "activation", "backend", ...).
Family validate_config(const MoEConfig& config);

/// The layer's runtime inputs. hidden_states etc. are in the family's input format
/// (prepare_activations); exactly one of routing_logits / topk_ids, as routing_input says.
struct MoeInputs {
  TensorView hidden_states;
  TensorView hidden_states_scale;  ///< nvfp4*, mxfp8
  TensorView per_token_scale;      ///< nvfp4_bf16tok
  TensorView routing_logits;       ///< kFromLogits
  TensorView topk_ids;             ///< kUnpackedPrecomputed
  TensorView topk_weights;         ///< kUnpackedPrecomputed (read only)
  TensorView output;               ///< optional bf16 [T, H] (do_finalize only)
};
/// Inputs holding `activations` (routing fields left for the caller).
MoeInputs moe_inputs(const StepFunActivations& activations);

/// Weights from logical bf16 W1 [E, 2I, H] (rows [up; gate]) and W2 [E, H, I] for the config's
/// family and local experts. step_limits: empty (config.activation.limit for every expert) or
/// exactly one limit per physical expert row (E_loc). fp8 and nvfp4 need a calibrated
/// hidden_states_scale_global. Result on w1's device (spec §9.4 prepare_weights).
StepFunWeights prepare_weights(const MoEConfig& config, const TensorView& w1, const TensorView& w2,
                               const std::vector<float>& step_limits = {},
                               double hidden_states_scale_global = 0,
                               double intermediate_scale_global = 0);
/// Activations for the config's family with the a_gs stored in `weights`.
StepFunActivations prepare_activations(const MoEConfig& config, const StepFunWeights& weights,
                                       const TensorView& hidden);

/// The MoeArgs the entry passes to stepfun_moe (validates the config and the pairing of config,
/// weights and inputs; the layer's own checks run in prepare_stepfun_moe).
MoeArgs moe_args(const MoEConfig& config, const StepFunWeights& weights, const MoeInputs& inputs);
/// Prepared launch of the layer described by the config (checks CAKEMOE_STEPFUN_FULL_PATH, then
/// prepare_stepfun_moe(moe_args(...))): launch() allocates nothing and never syncs the host.
StepFunMoeLaunch prepare_moe(const MoEConfig& config, const StepFunWeights& weights,
                             const MoeInputs& inputs);
/// One-shot: checks CAKEMOE_STEPFUN_FULL_PATH, maps the config and runs stepfun_moe on `stream`.
/// Returns [output] or, with do_finalize = false, [gemm2_output, expert_weights,
/// expanded_idx_to_permuted_idx].
std::vector<Tensor> run_moe(const MoEConfig& config, const StepFunWeights& weights,
                            const MoeInputs& inputs, Stream stream = nullptr);

/// Reads CAKEMOE_STEPFUN_FULL_PATH: unset, "auto" or "1" return; "0" throws Unsupported (the
/// FC1-only hybrid path does not exist in cakemoe); anything else throws InvalidArgument.
void check_full_path_env();

}  // namespace stepfun
}  // namespace cakemoe
