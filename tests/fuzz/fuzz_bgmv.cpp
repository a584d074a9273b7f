// BGMV entry: prepare_bgmv_moe, then run / close / every accessor of the plan (cakemoe/bgmv.h).
#include <optional>
#include <sstream>

#include "cakemoe/bgmv.h"
#include "fuzz_entries.h"

namespace cakemoe {
namespace fuzz {

using namespace bgmv;  // NOLINT: every name here is the API under test

namespace {

std::optional<bool> read_tristate(FuzzInput& in) {
  switch (in.byte() % 3) {
    case 1:
      return false;
    case 2:
      return true;
    default:
      return std::nullopt;
  }
}

void use_accessors(const BgmvPlan& plan) {
  std::ostringstream os;
  os << plan.backend_used() << plan.variant() << plan.grouped() << plan.order_remap()
     << plan.grouped_mma() << plan.pdl_mode() << plan.fallback_reason();
  if (const auto launch = plan.shrink_launch()) os << static_cast<int>(launch->kind) << launch->splits;
  if (const auto id = plan.schedule_id()) os << *id;
  os << plan.route_index().defined() << plan.y_accum().numel() << plan.shrink_out().numel()
     << plan.x().numel();
}

}  // namespace

// T, H, R, F, slices (byte % 9), L, E, P, num_experts, dtype byte, backend (flag + text),
// fallback-off flag, grouped, order_remap, B-slice count override, how, stream, then x, the A
// slices, the B slices, sorted_token_ids, expert_ids, lora_indices, topk_weights, shrink_out,
// y_accum.
void fuzz_bgmv(FuzzInput& in, Arena& arena) {
  const int64_t t = in.dim(), h = in.dim(), r = in.dim(), f = in.dim();
  const int slices = in.byte() % 9;
  const int64_t l = in.dim(), e = in.dim(), p = in.dim();
  const int64_t num_experts = in.dim();
  const uint8_t dtype_byte = in.byte();
  const DType dtype =
      dtype_byte < 0xF0 ? (dtype_byte & 1 ? DType::kFP16 : DType::kBF16) : in.any_enum<DType>();
  BgmvOptions options;
  if (in.flag()) options.backend = in.text();
  options.fallback = !in.flag();
  options.grouped = read_tristate(in);
  options.order_remap = read_tristate(in);
  const int b_slices = in.flag() ? in.byte() % 9 : slices;
  const int how = in.byte() % 4;
  const Stream stream = any_stream(in);

  const TensorView x = arena.view(dtype, {t, h}, float_fill());
  const std::vector<TensorView> lora_a =
      arena.views(slices, dtype, {l, e, r, h}, float_fill(0.05f));
  const std::vector<TensorView> lora_b =
      arena.views(b_slices, dtype, {l, e, f, r}, float_fill(0.5f));
  const TensorView sorted = arena.view(DType::kInt64, {p}, index_fill(0, t));
  const TensorView experts = arena.view(DType::kInt64, {p}, index_fill(0, e));
  const TensorView loras = arena.view(DType::kInt64, {t}, index_fill(-1, l));
  const TensorView weights = arena.view(DType::kFP32, {p}, float_fill());
  options.shrink_out = arena.view(dtype, {slices, p, r}, const_fill(0), false);
  options.y_accum = arena.view(DType::kFP32, {t, wrap_mul(slices, f)}, const_fill(0), false);

  BgmvPlan plan =
      prepare_bgmv_moe(x, lora_a, lora_b, sorted, experts, loras, weights, num_experts, options);
  const bool can = affordable({p, slices, r, wrap_add(h, f)}) && affordable({t, slices, f});
  switch (how) {
    case 0:
      break;
    case 1:
      if (can) plan.run(stream);
      use_accessors(plan);
      break;
    case 2:
      if (can) {
        plan.run(stream);
        plan.run(stream);
      }
      plan.close();
      if (can) plan.run(stream);
      break;
    default:
      use_accessors(plan);
      plan.close();
      plan.close();
      break;
  }
}

}  // namespace fuzz
}  // namespace cakemoe
