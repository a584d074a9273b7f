// BgmvPlan::Impl: the state a prepared BGMV plan owns (spec bgmv §1, §8). Internal header.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bgmv/plan.h"
#include "bgmv/validate.h"
#include "cakemoe/bgmv.h"
#include "reference/bgmv/bgmv.h"

namespace cakemoe {
namespace bgmv {

/// What prepare recorded about one bound tensor (spec §8): pointer, shape, strides.
struct Binding {
  std::string name;
  TensorView recorded;
  TensorView current;  ///< what the caller binds now; binding layers refresh it before run()
};

class BgmvPlan::Impl {
 public:
  ProblemShape shape;
  PlanChoice choice;
  std::string backend_used;
  std::string variant;
  reference::bgmv::CanonicalParams params;

  TensorView x, sorted_token_ids, expert_ids, lora_indices, topk_weights;
  std::vector<TensorView> lora_a, lora_b;
  TensorView y_accum, shrink_out, route_index;
  Tensor owned_y_accum, owned_shrink_out, owned_route_index;  // allocated by prepare

  /// Records every bound tensor; called once at the end of prepare.
  void record_bindings();
  /// A binding layer (e.g. Python) reports the caller's current view of bound tensor `name`
  /// ("x", "lora_a_weights[0]", "y_accum", ...); run() refuses any change. Throws
  /// InvalidArgument("name") for an unknown name.
  void update_binding(const std::string& name, const TensorView& current);
  /// spec §2 rule 4: computes y_accum from scratch and returns it.
  TensorView run(Stream stream);

 private:
  void check_bindings() const;
  reference::bgmv::Problem problem() const;

  std::vector<Binding> bindings_;
  std::mutex mutex_;  // a plan must not run concurrently with itself (spec §3.3)
};

namespace detail {

/// prepare_bgmv_moe returning the implementation (tests and binding layers keep a handle on it).
std::shared_ptr<BgmvPlan::Impl> prepare_impl(const TensorView& x,
                                             const std::vector<TensorView>& lora_a_weights,
                                             const std::vector<TensorView>& lora_b_weights,
                                             const TensorView& sorted_token_ids,
                                             const TensorView& expert_ids,
                                             const TensorView& lora_indices,
                                             const TensorView& topk_weights, int64_t num_experts,
                                             const BgmvOptions& options);

}  // namespace detail
}  // namespace bgmv
}  // namespace cakemoe
