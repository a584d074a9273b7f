// prepare_bgmv_moe (spec bgmv §1, §9, §10): validation, path choice, workspace allocation.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "bgmv/plan_impl.h"
#include "bgmv/warnings.h"
#include "core/check.h"
#include "core/cuda_util.h"

namespace cakemoe {
namespace bgmv {
namespace {

// NOTE: the CPU backend reports the choices of an SM90 device with 132 SMs, the measured target.
constexpr Arch kCpuEmulatedArch = Arch::kSm90a;
constexpr int kCpuEmulatedSms = 132;

// Reported by plans that took the portable path through PlanOverrides::variant.
constexpr const char* kForcedPortableReason = "forced portable path (internal option)";

bool print_plan_requested() {
  const char* env = std::getenv("CAKEMOE_PRINT_PLAN");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

}  // namespace

namespace detail {

std::shared_ptr<BgmvPlan::Impl> prepare_impl(
    const TensorView& x, const std::vector<TensorView>& lora_a_weights,
    const std::vector<TensorView>& lora_b_weights, const TensorView& sorted_token_ids,
    const TensorView& expert_ids, const TensorView& lora_indices, const TensorView& topk_weights,
    int64_t num_experts, const BgmvOptions& options, const PlanOverrides& overrides) {
  // Rules 1-11.
  const ProblemShape s =
      validate_operands(x, lora_a_weights, lora_b_weights, sorted_token_ids, expert_ids,
                        lora_indices, topk_weights, num_experts, options);
  // The kernels' int32 limits, on every path and before any index data is read.
  std::vector<std::pair<std::string, TensorView>> bound = {{"x", x},
                                                           {"sorted_token_ids", sorted_token_ids},
                                                           {"expert_ids", expert_ids},
                                                           {"lora_indices", lora_indices},
                                                           {"topk_weights", topk_weights},
                                                           {"shrink_out", options.shrink_out},
                                                           {"y_accum", options.y_accum}};
  for (size_t i = 0; i < lora_a_weights.size(); ++i) {
    bound.emplace_back("lora_a_weights[" + std::to_string(i) + "]", lora_a_weights[i]);
    bound.emplace_back("lora_b_weights[" + std::to_string(i) + "]", lora_b_weights[i]);
  }
  validate_int32_limits(s, bound, options);
  const bool on_cpu = s.device.type == DeviceType::kCPU;
  SupportQuery query;
  query.num_slices = s.num_slices;
  query.rank = s.rank;
  query.hidden = s.hidden;
  query.feat_out = s.feat_out;
  Arch arch = kCpuEmulatedArch;
  int num_sms = kCpuEmulatedSms;
  if (on_cpu) {
    // Rule 12 on host memory. NOTE: the capability rule is skipped: the CPU has none.
    validate_index_ranges(s, expert_ids, lora_indices);
  } else {
    // Rule 2 (device half) and rule 12 on host copies: prepare may synchronise, run may not.
    const DeviceFacts facts = query_cuda_device(s.device);
    const Tensor host_experts = core::copy_to(expert_ids, Device::cpu());
    const Tensor host_loras = core::copy_to(lora_indices, Device::cpu());
    validate_index_ranges(s, host_experts, host_loras);
    query.capability = facts.capability;
    query.native_code_loads = facts.native_code_loads;
    // A device that loads only PTX runs the portable pair from it, like any other device.
    arch = facts.native_code_loads
               ? arch_from_capability(facts.capability.major, facts.capability.minor)
               : Arch::kOther;
    num_sms = facts.num_sms;
  }
  // Rule 13.
  const CakeSupport support = cake_support(query);
  if (!support.supported() && !options.fallback) {
    throw Unsupported(support.argument, support.reason);
  }
  const bool portable = !support.supported() || overrides.variant == Variant::kPortable;
  // Rule 14.
  validate_workspaces(s, options, portable);
  if (portable && !on_cpu) validate_portable_limits(s);
  // Rule 15 (and the forced pipelines' kernel limits, inside choose_cake_plan).
  core::require(!(options.grouped.value_or(false) && options.order_remap.value_or(false)),
                "order_remap", "order_remap=true cannot be combined with grouped=true");
  PlanChoice choice;
  if (portable) {
    choice = choose_portable_plan(support.supported() ? kForcedPortableReason : support.reason);
  } else {
    ProblemDesc desc;
    desc.num_tokens = s.num_tokens;
    desc.num_pairs = s.num_pairs;
    desc.hidden = s.hidden;
    desc.rank = s.rank;
    desc.num_loras = s.num_loras;
    desc.num_experts = s.num_experts;
    desc.arch = arch;
    desc.num_sms = num_sms;
    desc.grouped = options.grouped;
    desc.order_remap = options.order_remap;
    // NOTE: the CPU backend emulates an SM90 build with every unit (same bits either way).
    desc.specialized_built = on_cpu || detail::specialized_unit_built(s.hidden);
    desc.overrides = overrides;
    choice = choose_cake_plan(desc);
  }
  if (portable && !support.supported()) warn_fallback_once(support.reason);

  auto impl = std::make_shared<BgmvPlan::Impl>();
  impl->shape = s;
  impl->choice = choice;
  impl->backend_used = on_cpu ? "cpu_reference" : (portable ? "portable" : "cake");
  impl->variant = variant_name(choice.variant);
  impl->params.shrink_splits = choice.shrink_splits;
  impl->params.grouped = choice.grouped;
  impl->x = x;
  impl->lora_a = lora_a_weights;
  impl->lora_b = lora_b_weights;
  impl->sorted_token_ids = sorted_token_ids;
  impl->expert_ids = expert_ids;
  impl->lora_indices = lora_indices;
  impl->topk_weights = topk_weights;
  if (options.shrink_out.defined()) {
    impl->shrink_out = options.shrink_out;
  } else {
    impl->owned_shrink_out = Tensor::empty({s.num_slices, s.num_pairs, s.rank}, s.dtype, s.device);
    impl->shrink_out = impl->owned_shrink_out.view();
  }
  if (options.y_accum.defined()) {
    impl->y_accum = options.y_accum;
  } else {
    impl->owned_y_accum =
        Tensor::empty({s.num_tokens, s.num_slices * s.feat_out}, DType::kFP32, s.device);
    impl->y_accum = impl->owned_y_accum.view();
  }
  if (!portable) {
    // spec §3.3: allocated zeroed once at prepare, never reset afterwards.
    impl->owned_route_index =
        Tensor::empty({route_index_layout(s.num_tokens).total_words}, DType::kInt32, s.device);
    core::zero_synchronously({impl->owned_route_index});
    impl->route_index = impl->owned_route_index.view();
  }
  if (!on_cpu) setup_cuda_plan(*impl, arch);
  impl->record_bindings();
  if (print_plan_requested()) std::cerr << choice << "\n";
  return impl;
}

}  // namespace detail

BgmvPlan prepare_bgmv_moe(const TensorView& x, const std::vector<TensorView>& lora_a_weights,
                          const std::vector<TensorView>& lora_b_weights,
                          const TensorView& sorted_token_ids, const TensorView& expert_ids,
                          const TensorView& lora_indices, const TensorView& topk_weights,
                          int64_t num_experts, const BgmvOptions& options) {
  return BgmvPlan(detail::prepare_impl(x, lora_a_weights, lora_b_weights, sorted_token_ids,
                                       expert_ids, lora_indices, topk_weights, num_experts,
                                       options));
}

}  // namespace bgmv
}  // namespace cakemoe
