// BgmvPlan::Impl: the state a prepared BGMV plan owns (spec bgmv §1, §8). Internal header.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bgmv/cake_launch.h"
#include "bgmv/cuda_plan.h"
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
  /// Device workspaces of the grouped pipeline (§5) and the order remap (§6); undefined when
  /// unused.
  Tensor group_workspace, group_partials, order_workspace;
  /// The CUDA runtime (CUDA tensors only): launch sequence and private graph (spec §8).
  std::unique_ptr<CudaPlan> cuda;

  /// Records every bound tensor; called once at the end of prepare.
  void record_bindings();
  /// A binding layer (e.g. Python) reports the caller's current view of bound tensor `name`
  /// ("x", "lora_a_weights[0]", "y_accum", ...); run() refuses any change. Throws
  /// InvalidArgument("name") for an unknown name.
  void update_binding(const std::string& name, const TensorView& current);
  /// spec §2 rule 4: computes y_accum from scratch and returns it.
  TensorView run(Stream stream);
  /// spec §8 close(): synchronises the owner stream and releases the graph (CUDA plans).
  void close();

 private:
  void check_bindings() const;
  reference::bgmv::Problem problem() const;

  std::vector<Binding> bindings_;
  std::mutex mutex_;  // a plan must not run concurrently with itself (spec §3.3)
};

namespace detail {

/// prepare_bgmv_moe returning the implementation (tests and binding layers keep a handle on it),
/// with forced plan choices for tests and benchmarks (PlanOverrides; none by default). A forced
/// portable path (variant kPortable) reports fallback_reason "forced portable path (internal
/// option)" and warns nothing.
std::shared_ptr<BgmvPlan::Impl> prepare_impl(
    const TensorView& x, const std::vector<TensorView>& lora_a_weights,
    const std::vector<TensorView>& lora_b_weights, const TensorView& sorted_token_ids,
    const TensorView& expert_ids, const TensorView& lora_indices, const TensorView& topk_weights,
    int64_t num_experts, const BgmvOptions& options, const PlanOverrides& overrides = {});

/// Device facts prepare needs (spec §7, §9); Unsupported("device") when `device` is not a
/// visible CUDA device (or the build has no CUDA).
struct DeviceFacts {
  Capability capability;
  int num_sms = 0;
  bool native_code_loads = true;  ///< core::cuda_native_code_loads
};
DeviceFacts query_cuda_device(Device device);
/// Whether this build has the specialized kernel unit of `hidden` (rank 32; false without CUDA).
bool specialized_unit_built(int64_t hidden);
/// Builds impl.cuda (launch operands, device workspaces) for a CUDA plan whose choice, shape,
/// bound tensors, y_accum / shrink_out and route index are set (cuda_plan_setup.cpp).
void setup_cuda_plan(BgmvPlan::Impl& impl, Arch arch);
/// The Cake shrink/expand operands of a prepared Cake-path plan (bound tensors, workspaces and
/// the chosen shrink kind / splits / schedule / PDL mode). `order` stays null: the order-remap
/// workspace is bound separately.
CakeParams cake_params(const BgmvPlan::Impl& impl);

}  // namespace detail
}  // namespace bgmv
}  // namespace cakemoe
