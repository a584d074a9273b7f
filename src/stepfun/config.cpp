// The unified configuration (spec stepfun §9.3, §9.4): names, the quant-pair -> family map and
// validate_config, which rejects every option the StepFun backend does not serve.
#include <cmath>
#include <string>

#include "cakemoe/config.h"
#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/checked.h"

namespace cakemoe {
namespace stepfun {
namespace {

using core::require;
using core::require_supported;

const char* kQuantPairs =
    "cake_stepfun supports NVFP4xNVFP4 (optionally per_token_scale), BF16xBF16, "
    "FP8PerTensorxFP8PerTensor and MXFP8xMXFP8";

void validate_routing(const MoEConfig& c) {
  const RoutingConfig& r = c.routing;
  require_supported(r.method == RoutingMethod::kRenormalize, "routing.method",
                    std::string("cake_stepfun implements only Renormalize routing (top-K then "
                                "softmax over the K, spec §2.2), got ") +
                        routing_method_name(r.method));
  require_supported(!r.use_routing_bias && !r.routing_bias.defined(), "routing.routing_bias",
                    "routing bias is not supported by cake_stepfun; compute biased routing in "
                    "the framework and pass topk_ids + topk_weights (UnpackedPrecomputed)");
  require(r.num_experts > 0, "routing.num_experts", "must be > 0");
  core::require_in_range(r.num_experts, 1, kMaxNumExperts, "routing.num_experts", "num_experts");
  require(r.top_k >= 1 && r.top_k <= r.num_experts, "routing.top_k",
          "must satisfy 1 <= top_k <= num_experts (" + std::to_string(r.num_experts) + ")");
  core::require_in_range(r.top_k, 1, kMaxTopK, "routing.top_k", "top_k");
  require_supported(r.n_group <= 1 && r.topk_group <= 1, "routing.n_group",
                    "expert groups (n_group / topk_group > 1) belong to DeepSeekV3 routing; "
                    "Renormalize has none (leave both 0 or 1)");
  require(r.n_group >= 0 && r.topk_group >= 0, "routing.n_group",
          "n_group and topk_group must be >= 0");
  if (r.routed_scaling_factor) {
    const double s = *r.routed_scaling_factor;
    require(std::isfinite(s) && s > 0.0, "routing.routed_scaling_factor",
            "must be finite and > 0");
    require(c.routing_input == RoutingInputMode::kFromLogits || s == 1.0,
            "routing.routed_scaling_factor",
            "applies only to FromLogits routing; with precomputed ids bake it into topk_weights");
  }
  require(static_cast<unsigned>(c.routing_input) <=
              static_cast<unsigned>(RoutingInputMode::kPackedPrecomputed),
          "routing_input",
          "is not a RoutingInputMode value (" +
              std::to_string(static_cast<unsigned>(c.routing_input)) + ")");
  require_supported(c.routing_input != RoutingInputMode::kPackedPrecomputed, "routing_input",
                    "PackedPrecomputed routing is not supported by cake_stepfun; use FromLogits "
                    "or UnpackedPrecomputed (topk_ids + topk_weights)");
}

void validate_experts(const MoEConfig& c) {
  const ExpertConfig& x = c.experts;
  require_supported(x.num_fused_shared_experts == 0, "experts.num_fused_shared_experts",
                    "fused shared experts are not supported by cake_stepfun; run the shared "
                    "expert outside the fused MoE");
  require(x.intermediate_size > 0 && x.intermediate_size % 64 == 0, "experts.intermediate_size",
          "must be a positive multiple of 64, got " + std::to_string(x.intermediate_size));
  core::require_in_range(x.intermediate_size, 64, kMaxIntermediateSize, "experts.intermediate_size",
                         "intermediate_size");
  const int64_t e = c.routing.num_experts;
  require(x.local_expert_offset >= 0 && x.local_expert_offset < e, "experts.local_expert_offset",
          "must lie in [0, num_experts = " + std::to_string(e) + ")");
  require(x.local_num_experts == -1 || x.local_num_experts > 0, "experts.local_num_experts",
          "must be -1 (all) or > 0");
  // NOTE: written as a difference: the sum of two caller values may overflow.
  require(x.local_num_experts == -1 || x.local_num_experts <= e - x.local_expert_offset,
          "experts.local_num_experts",
          "local_expert_offset + local_num_experts must be <= num_experts = " + std::to_string(e));
}

}  // namespace

const char* routing_method_name(RoutingMethod method) {
  switch (method) {
    case RoutingMethod::kDefault: return "Default";
    case RoutingMethod::kRenormalize: return "Renormalize";
    case RoutingMethod::kDeepSeekV3: return "DeepSeekV3";
    case RoutingMethod::kLlama4: return "Llama4";
    case RoutingMethod::kRenormalizeNaive: return "RenormalizeNaive";
    case RoutingMethod::kTopK: return "TopK";
  }
  return "unknown";
}

const char* quant_format_name(QuantFormat format) {
  switch (format) {
    case QuantFormat::kBF16: return "BF16";
    case QuantFormat::kFP8PerTensor: return "FP8PerTensor";
    case QuantFormat::kFP8BlockScale: return "FP8BlockScale";
    case QuantFormat::kMXFP8: return "MXFP8";
    case QuantFormat::kMXFP4: return "MXFP4";
    case QuantFormat::kNVFP4: return "NVFP4";
  }
  return "unknown";
}

const char* activation_name(ActivationType type) {
  switch (type) {
    case ActivationType::kSwiGLUStep: return "SwiGLUStep";
    case ActivationType::kSwiGLU: return "SwiGLU";
    case ActivationType::kSwiGLUBias: return "SwiGLUBias";
    case ActivationType::kGeGLU: return "GeGLU";
    case ActivationType::kReLU2: return "ReLU2";
    case ActivationType::kIdentity: return "Identity";
  }
  return "unknown";
}

bool CakeStepFunConfig::supported(int compute_capability) {
  return compute_capability == 90 || compute_capability == 100 || compute_capability == 103;
}

Family family_of(const QuantConfig& q) {
  const std::string pair =
      std::string(quant_format_name(q.weights)) + "x" + quant_format_name(q.activations);
  require_supported(q.weights == q.activations, "quant",
                    std::string(kQuantPairs) + "; got " + pair);
  require_supported(!q.per_token_scale || q.weights == QuantFormat::kNVFP4, "quant",
                    "per_token_scale is only defined for NVFP4xNVFP4; got " + pair);
  switch (q.weights) {
    case QuantFormat::kNVFP4: return q.per_token_scale ? Family::kNVFP4BF16Tok : Family::kNVFP4;
    case QuantFormat::kBF16: return Family::kBF16;
    case QuantFormat::kFP8PerTensor: return Family::kFP8;
    case QuantFormat::kMXFP8: return Family::kMXFP8;
    default: break;
  }
  throw Unsupported("quant", std::string(kQuantPairs) + "; got " + pair);
}

QuantConfig quant_of(Family family) {
  switch (family) {
    case Family::kNVFP4: return QuantConfig::nvfp4(false);
    case Family::kNVFP4BF16Tok: return QuantConfig::nvfp4(true);
    case Family::kBF16: return QuantConfig::bf16();
    case Family::kFP8: return QuantConfig::fp8_per_tensor();
    case Family::kMXFP8: return QuantConfig::mxfp8();
  }
  throw InvalidArgument("family", "unknown family");
}

Family validate_config(const MoEConfig& c) {
  // NOTE: spec §9.3: the backend string is checked first, as the unified API dispatches on it.
  require(c.backend.backend == "cake_stepfun", "backend",
          "CakeStepFunConfig.backend must be 'cake_stepfun', got '" + c.backend.backend + "'");
  require_supported(!c.lora_deltas, "lora_deltas",
                    "LoRA deltas are not supported by cake_stepfun (use the cakemoe::bgmv "
                    "MoE-LoRA pipeline)");
  require_supported(c.activation.type == ActivationType::kSwiGLUStep, "activation",
                    std::string("cake_stepfun requires SwiGLUStep(limit), got ") +
                        activation_name(c.activation.type));
  require(std::isfinite(c.activation.limit) && c.activation.limit > 0.0f, "activation",
          "SwiGLUStep limit must be finite and > 0");
  const Family family = family_of(c.quant);
  validate_routing(c);
  validate_experts(c);
  require(c.execution.tune_max_num_tokens > 0, "execution.tune_max_num_tokens", "must be > 0");
  return family;
}

}  // namespace stepfun
}  // namespace cakemoe
