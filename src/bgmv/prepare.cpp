// prepare_bgmv_moe (spec bgmv §1, §9, §10): validation, path choice, workspace allocation.
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "bgmv/plan_impl.h"
#include "bgmv/warnings.h"
#include "core/check.h"

namespace cakemoe {
namespace bgmv {
namespace {

// NOTE: the CPU backend reports the choices of an H200 (sm90a, 132 SMs), the measured target.
constexpr Arch kCpuEmulatedArch = Arch::kSm90a;
constexpr int kCpuEmulatedSms = 132;

bool print_plan_requested() {
  const char* env = std::getenv("CAKEMOE_PRINT_PLAN");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

}  // namespace

namespace detail {

std::shared_ptr<BgmvPlan::Impl> prepare_impl(const TensorView& x,
                                             const std::vector<TensorView>& lora_a_weights,
                                             const std::vector<TensorView>& lora_b_weights,
                                             const TensorView& sorted_token_ids,
                                             const TensorView& expert_ids,
                                             const TensorView& lora_indices,
                                             const TensorView& topk_weights, int64_t num_experts,
                                             const BgmvOptions& options) {
  // Rules 1-11.
  const ProblemShape s =
      validate_operands(x, lora_a_weights, lora_b_weights, sorted_token_ids, expert_ids,
                        lora_indices, topk_weights, num_experts, options);
  const bool on_cpu = s.device.type == DeviceType::kCPU;
  // Rule 12 reads index contents: host memory only (the CUDA path checks on the device).
  if (on_cpu) validate_index_ranges(s, expert_ids, lora_indices);
  // Rule 13. NOTE: the capability rule is skipped: the CPU has none, and this build has no
  // CUDA runtime to query one.
  SupportQuery query;
  query.num_slices = s.num_slices;
  query.rank = s.rank;
  query.hidden = s.hidden;
  query.feat_out = s.feat_out;
  const CakeSupport support = cake_support(query);
  if (!support.supported() && !options.fallback) {
    throw Unsupported(support.argument, support.reason);
  }
  const bool portable = !support.supported();
  // Rule 14.
  validate_workspaces(s, options, portable);
  // Rule 15 (and the forced pipelines' kernel limits, inside choose_cake_plan).
  core::require(!(options.grouped.value_or(false) && options.order_remap.value_or(false)),
                "order_remap", "order_remap=true cannot be combined with grouped=true");
  PlanChoice choice;
  if (portable) {
    choice = choose_portable_plan(support.reason);
  } else {
    ProblemDesc desc;
    desc.num_tokens = s.num_tokens;
    desc.num_pairs = s.num_pairs;
    desc.hidden = s.hidden;
    desc.rank = s.rank;
    desc.num_loras = s.num_loras;
    desc.num_experts = s.num_experts;
    desc.arch = kCpuEmulatedArch;
    desc.num_sms = kCpuEmulatedSms;
    desc.grouped = options.grouped;
    desc.order_remap = options.order_remap;
    choice = choose_cake_plan(desc);
    validate_int32_limits({{"x", x},
                           {"lora_a_weights[0]", lora_a_weights[0]},
                           {"lora_b_weights[0]", lora_b_weights[0]},
                           {"sorted_token_ids", sorted_token_ids},
                           {"shrink_out", options.shrink_out}},
                          options.y_accum.defined()
                              ? options.y_accum
                              : TensorView(nullptr, DType::kFP32,
                                           {s.num_tokens, s.num_slices * s.feat_out}));
  }
  if (!on_cpu) {
    throw Unsupported("device", "the CUDA BGMV backend is not built yet (issue #4)");
  }
  if (portable) warn_fallback_once(support.reason);

  auto impl = std::make_shared<BgmvPlan::Impl>();
  impl->shape = s;
  impl->choice = choice;
  impl->backend_used = "cpu_reference";
  impl->variant = variant_name(choice.variant);
  impl->params.shrink_splits = choice.shrink_launch ? choice.shrink_launch->splits : 1;
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
    impl->owned_shrink_out = Tensor::empty({s.num_slices, s.num_pairs, s.rank}, s.dtype);
    impl->shrink_out = impl->owned_shrink_out.view();
  }
  if (options.y_accum.defined()) {
    impl->y_accum = options.y_accum;
  } else {
    impl->owned_y_accum = Tensor::empty({s.num_tokens, s.num_slices * s.feat_out}, DType::kFP32);
    impl->y_accum = impl->owned_y_accum.view();
  }
  if (!portable) {
    // spec §3.3: allocated zeroed once at prepare, never reset afterwards.
    impl->owned_route_index =
        Tensor::empty({route_index_layout(s.num_tokens).total_words}, DType::kInt32);
    std::memset(impl->owned_route_index.data(), 0, impl->owned_route_index.nbytes());
    impl->route_index = impl->owned_route_index.view();
  }
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
