// The unified configuration of `cakemoe._cakemoe` (spec stepfun §9.3, §9.4): the Python MoEConfig
// arrives as a flat dict of dotted field names ("routing.num_experts", ...) and becomes the C++
// MoEConfig; weights travel back as views of the caller's arrays.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cakemoe/config.h"
#include "kwargs.h"
#include "stepfun_binding.h"
#include "views.h"

namespace nb = nanobind;

namespace cakemoe {
namespace python {
namespace {

using namespace stepfun;

template <typename Enum, size_t N>
Enum parse_enum(Kwargs& kw, const std::string& field, const Enum (&values)[N],
                const char* (*name_of)(Enum), Enum fallback) {
  const std::string name = kw.text(field, name_of(fallback));
  std::string valid;
  for (Enum v : values) {
    if (name == name_of(v)) return v;
    valid += (valid.empty() ? "" : ", ") + std::string(name_of(v));
  }
  throw InvalidArgument(field, "unknown value '" + name + "'; valid: " + valid);
}

const char* input_mode_name(RoutingInputMode mode) {
  switch (mode) {
    case RoutingInputMode::kFromLogits:
      return "FromLogits";
    case RoutingInputMode::kUnpackedPrecomputed:
      return "UnpackedPrecomputed";
    case RoutingInputMode::kPackedPrecomputed:
      return "PackedPrecomputed";
  }
  return "unknown";
}

constexpr QuantFormat kFormats[] = {QuantFormat::kBF16,          QuantFormat::kFP8PerTensor,
                                    QuantFormat::kFP8BlockScale, QuantFormat::kMXFP8,
                                    QuantFormat::kMXFP4,         QuantFormat::kNVFP4};

QuantConfig to_quant(Kwargs& kw) {
  QuantConfig q;
  q.weights = parse_enum(kw, "quant.weights", kFormats, quant_format_name, q.weights);
  q.activations = parse_enum(kw, "quant.activations", kFormats, quant_format_name, q.activations);
  q.per_token_scale = kw.flag("quant.per_token_scale", false);
  return q;
}

MoEConfig to_config(nb::dict fields) {
  Kwargs kw(fields, "MoEConfig");
  MoEConfig c;
  const RoutingMethod methods[] = {RoutingMethod::kDefault,          RoutingMethod::kRenormalize,
                                   RoutingMethod::kDeepSeekV3,       RoutingMethod::kLlama4,
                                   RoutingMethod::kRenormalizeNaive, RoutingMethod::kTopK};
  const ActivationType activations[] = {ActivationType::kSwiGLUStep, ActivationType::kSwiGLU,
                                        ActivationType::kSwiGLUBias, ActivationType::kGeGLU,
                                        ActivationType::kReLU2,      ActivationType::kIdentity};
  const RoutingInputMode modes[] = {RoutingInputMode::kFromLogits,
                                    RoutingInputMode::kUnpackedPrecomputed,
                                    RoutingInputMode::kPackedPrecomputed};
  c.routing.num_experts = kw.integer("routing.num_experts", std::nullopt);
  c.routing.top_k = kw.integer("routing.top_k", std::nullopt);
  c.routing.method =
      parse_enum(kw, "routing.method", methods, routing_method_name, RoutingMethod::kRenormalize);
  c.routing.use_routing_bias = kw.flag("routing.use_routing_bias", false);
  c.routing.routing_bias = kw.tensor("routing.routing_bias");
  c.routing.n_group = kw.integer("routing.n_group", 0);
  c.routing.topk_group = kw.integer("routing.topk_group", 0);
  c.routing.routed_scaling_factor = kw.optional_real("routing.routed_scaling_factor");
  c.quant = to_quant(kw);
  c.experts.intermediate_size = kw.integer("experts.intermediate_size", std::nullopt);
  c.experts.local_expert_offset = kw.integer("experts.local_expert_offset", 0);
  c.experts.local_num_experts = kw.integer("experts.local_num_experts", -1);
  c.experts.num_fused_shared_experts = kw.integer("experts.num_fused_shared_experts", 0);
  c.activation.type =
      parse_enum(kw, "activation.type", activations, activation_name, ActivationType::kSwiGLUStep);
  c.activation.limit = static_cast<float>(kw.real("activation.limit", c.activation.limit));
  c.backend.backend = kw.text("backend", c.backend.backend);
  c.routing_input =
      parse_enum(kw, "routing_input", modes, input_mode_name, RoutingInputMode::kFromLogits);
  c.execution.enable_pdl = kw.flag("execution.enable_pdl", true);
  c.execution.tune_max_num_tokens = kw.integer("execution.tune_max_num_tokens", 8192);
  c.finalize.do_finalize = kw.flag("finalize.do_finalize", true);
  c.lora_deltas = kw.flag("lora_deltas", false);
  kw.finish();
  return c;
}

/// Hands out one caller-owned pointer: lets an owning Tensor stand for a view of a Python array
/// (the Python weights object keeps the memory alive; nothing is freed here).
class BorrowedAllocator final : public Allocator {
 public:
  BorrowedAllocator(void* data, Device device) : data_(data), device_(device) {}
  void* allocate(size_t) override { return data_; }
  void deallocate(void*, size_t) override {}
  Device device() const override { return device_; }

 private:
  void* data_;
  Device device_;
};

/// A StepFunWeights over the caller's arrays. Members are destroyed in reverse order: the
/// tensors before the allocators their deleters name.
struct BorrowedWeights {
  std::vector<std::unique_ptr<BorrowedAllocator>> allocators;
  StepFunWeights weights;

  Tensor borrow(Kwargs& kw, const std::string& name) {
    const TensorView v = kw.tensor(name);
    if (!v.defined()) return Tensor();
    // NOTE: an owning Tensor is always row-major; other layouts cannot be borrowed as one.
    if (!v.is_contiguous()) throw InvalidArgument(name, "must be contiguous (row-major)");
    if (v.data == nullptr) throw InvalidArgument(name, "has no data");
    allocators.push_back(std::make_unique<BorrowedAllocator>(v.data, v.device));
    return Tensor::empty(v.sizes(), v.dtype, v.device, allocators.back().get());
  }
};

void borrow_weights(nb::dict fields, BorrowedWeights* out) {
  Kwargs kw(fields, "weights");
  StepFunWeights& w = out->weights;
  w.family = kw.family("family");
  w.gemm1_weights = out->borrow(kw, "gemm1_weights");
  w.gemm1_weights_scale = out->borrow(kw, "gemm1_weights_scale");
  w.gemm2_weights = out->borrow(kw, "gemm2_weights");
  w.gemm2_weights_scale = out->borrow(kw, "gemm2_weights_scale");
  w.output1_scale_scalar = out->borrow(kw, "output1_scale_scalar");
  w.output1_scale_gate_scalar = out->borrow(kw, "output1_scale_gate_scalar");
  w.output2_scale_scalar = out->borrow(kw, "output2_scale_scalar");
  w.gemm1_clamp_limit = out->borrow(kw, "gemm1_clamp_limit");
  w.hidden_states_scale_global = kw.real("hidden_states_scale_global", 0.0);
  w.intermediate_scale_global = kw.real("intermediate_scale_global", 0.0);
  kw.finish();
}

MoeInputs moe_inputs_of(nb::dict fields) {
  Kwargs kw(fields, "run_moe");
  MoeInputs in;
  in.hidden_states = kw.tensor("hidden_states");
  in.hidden_states_scale = kw.tensor("hidden_states_scale");
  in.per_token_scale = kw.tensor("per_token_scale");
  in.routing_logits = kw.tensor("routing_logits");
  in.topk_ids = kw.tensor("topk_ids");
  in.topk_weights = kw.tensor("topk_weights");
  in.output = kw.tensor("output", Access::kWrite);
  kw.finish();
  return in;
}

}  // namespace

void register_config(nb::module_& m) {
  m.def("validate_config", [](nb::dict config) {
    return std::string(family_name(validate_config(to_config(config))));
  });
  m.def("family_of", [](nb::dict fields) {
    Kwargs kw(fields, "QuantConfig");
    const QuantConfig q = to_quant(kw);
    kw.finish();
    return std::string(family_name(family_of(q)));
  });
  m.def("check_full_path_env", &check_full_path_env);
  m.def("cake_stepfun_supported", &CakeStepFunConfig::supported, nb::arg("compute_capability"));
  m.def("prepare_weights_for_config", [](nb::dict config, nb::dict kwargs) {
    const MoEConfig c = to_config(config);
    Kwargs kw(kwargs, "prepare_weights");
    const TensorView w1 = kw.tensor("w1"), w2 = kw.tensor("w2");
    const std::vector<float> limits = kw.reals("step_limits");
    const double a_gs = kw.real("hidden_states_scale_global", 0.0);
    const double c_gs = kw.real("intermediate_scale_global", 0.0);
    kw.finish();
    StepFunWeights w;
    {
      nb::gil_scoped_release release;
      w = prepare_weights(c, w1, w2, limits, a_gs, c_gs);
    }
    return weights_dict(w);
  });
  m.def("prepare_activations_for_config", [](nb::dict config, nb::dict weights, nb::handle hidden) {
    const MoEConfig c = to_config(config);
    BorrowedWeights w;
    borrow_weights(weights, &w);
    nb::dict kwargs;
    kwargs["hidden"] = hidden;
    Kwargs kw(kwargs, "prepare_activations");
    const TensorView h = kw.tensor("hidden");
    StepFunActivations a;
    {
      nb::gil_scoped_release release;
      a = prepare_activations(c, w.weights, h);
    }
    return activations_dict(a);
  });
  m.def("prepare_moe", [](nb::dict config, nb::dict weights, nb::dict inputs) {
    const MoEConfig c = to_config(config);
    BorrowedWeights w;
    borrow_weights(weights, &w);
    const MoeInputs in = moe_inputs_of(inputs);
    nb::gil_scoped_release release;
    return prepare_moe(c, w.weights, in);
  });
  m.def("run_moe", [](nb::dict config, nb::dict weights, nb::dict inputs, uintptr_t stream) {
    const MoEConfig c = to_config(config);
    BorrowedWeights w;
    borrow_weights(weights, &w);
    const MoeInputs in = moe_inputs_of(inputs);
    std::vector<Tensor> outputs;
    {
      nb::gil_scoped_release release;
      outputs = run_moe(c, w.weights, in, reinterpret_cast<Stream>(stream));
    }
    return owned_outputs(outputs);
  });
}

}  // namespace python
}  // namespace cakemoe
