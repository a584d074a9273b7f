// BgmvPlan methods and the CPU run path (spec bgmv §2, §8).
#include "bgmv/plan_impl.h"

#include <algorithm>

#include "core/check.h"

namespace cakemoe {
namespace bgmv {
namespace {

bool same_binding(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.ndim != b.ndim || a.dtype != b.dtype || a.device != b.device) {
    return false;
  }
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

}  // namespace

void BgmvPlan::Impl::record_bindings() {
  bindings_.clear();
  const auto add = [&](const std::string& name, const TensorView& v) {
    bindings_.push_back(Binding{name, v, v});
  };
  add("x", x);
  for (size_t i = 0; i < lora_a.size(); ++i) {
    add("lora_a_weights[" + std::to_string(i) + "]", lora_a[i]);
    add("lora_b_weights[" + std::to_string(i) + "]", lora_b[i]);
  }
  add("sorted_token_ids", sorted_token_ids);
  add("expert_ids", expert_ids);
  add("lora_indices", lora_indices);
  add("topk_weights", topk_weights);
  add("shrink_out", shrink_out);
  add("y_accum", y_accum);
}

void BgmvPlan::Impl::update_binding(const std::string& name, const TensorView& current) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Binding& b : bindings_) {
    if (b.name == name) {
      b.current = current;
      return;
    }
  }
  throw InvalidArgument(name, "is not a tensor bound by this plan");
}

void BgmvPlan::Impl::check_bindings() const {
  for (const Binding& b : bindings_) {
    core::require(same_binding(b.recorded, b.current), b.name,
                  "tensor storage, shape or stride changed after preparation");
  }
}

reference::bgmv::Problem BgmvPlan::Impl::problem() const {
  reference::bgmv::Problem p;
  p.dtype = shape.dtype;
  p.num_tokens = shape.num_tokens;
  p.hidden = shape.hidden;
  p.rank = shape.rank;
  p.feat_out = shape.feat_out;
  p.num_pairs = shape.num_pairs;
  p.num_loras = shape.num_loras;
  p.num_experts = shape.num_experts;
  p.x = x.ptr<const uint16_t>();
  for (size_t i = 0; i < lora_a.size(); ++i) {
    p.lora_a.push_back(lora_a[i].ptr<const uint16_t>());
    p.lora_b.push_back(lora_b[i].ptr<const uint16_t>());
  }
  p.sorted_token_ids = sorted_token_ids.ptr<const int64_t>();
  p.expert_ids = expert_ids.ptr<const int64_t>();
  p.lora_indices = lora_indices.ptr<const int64_t>();
  p.topk_weights = topk_weights.ptr<const float>();
  return p;
}

TensorView BgmvPlan::Impl::run(Stream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_bindings();
  if (cuda) {
    // NOTE: index ranges were checked at prepare; re-reading device memory here would need a
    // host sync (run must stay capturable). The kernels skip out-of-range ids (memory-safe).
    cuda->run(stream);
    return y_accum;
  }
  // The stream is ignored by the CPU backend.
  // Contents may change between runs (spec §8), so the ranges the engine relies on are re-read.
  validate_index_ranges(shape, expert_ids, lora_indices);
  const reference::bgmv::Problem p = problem();
  reference::bgmv::run(p, params, shrink_out.ptr<uint16_t>(), y_accum.ptr<float>(),
                       y_accum.strides[0]);
  if (route_index.defined() && !choice.grouped) {
    // NOTE: spec §3.3: after r runs word0 == r and word1 == (r - 1) & 1; the CPU keeps only these.
    int32_t* words = route_index.ptr<int32_t>();
    words[0] += 1;
    words[1] = (words[0] - 1) & 1;
  }
  return y_accum;
}

void BgmvPlan::Impl::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cuda) cuda->close();
}

// ---- BgmvPlan -----------------------------------------------------------------------------------

namespace {

BgmvPlan::Impl& checked(const std::shared_ptr<BgmvPlan::Impl>& impl) {
  core::require(impl != nullptr, "plan", "is empty (default-constructed); call prepare_bgmv_moe");
  return *impl;
}

}  // namespace

BgmvPlan::BgmvPlan() = default;
BgmvPlan::BgmvPlan(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

TensorView BgmvPlan::run(Stream stream) { return checked(impl_).run(stream); }
void BgmvPlan::close() { checked(impl_).close(); }

const std::string& BgmvPlan::backend_used() const { return checked(impl_).backend_used; }
const std::string& BgmvPlan::variant() const { return checked(impl_).variant; }
std::optional<ShrinkLaunch> BgmvPlan::shrink_launch() const {
  return checked(impl_).choice.shrink_launch;
}
bool BgmvPlan::grouped() const { return checked(impl_).choice.grouped; }
bool BgmvPlan::order_remap() const { return checked(impl_).choice.order_remap; }
bool BgmvPlan::grouped_mma() const {
  // NOTE: the CPU engine runs the canonical grouped order; only CUDA plans use tensor cores.
  const Impl& impl = checked(impl_);
  return impl.backend_used == "cake" && impl.choice.grouped &&
         impl.choice.geometry.tensor_core_expand;
}
int BgmvPlan::pdl_mode() const { return checked(impl_).choice.pdl_mode; }
std::optional<int> BgmvPlan::schedule_id() const { return checked(impl_).choice.schedule_id; }
const std::string& BgmvPlan::fallback_reason() const {
  return checked(impl_).choice.fallback_reason;
}
TensorView BgmvPlan::route_index() const { return checked(impl_).route_index; }
TensorView BgmvPlan::y_accum() const { return checked(impl_).y_accum; }
TensorView BgmvPlan::shrink_out() const { return checked(impl_).shrink_out; }
TensorView BgmvPlan::x() const { return checked(impl_).x; }

}  // namespace bgmv
}  // namespace cakemoe
