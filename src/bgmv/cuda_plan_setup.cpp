// Prepare-time setup of CUDA plans (spec bgmv §1, §5, §6, §8, §9): device facts, device
// workspaces, and the launch operands of the chosen sequence. Runs once per plan; may allocate
// and synchronise (run() never does).
#include <cstdint>
#include <memory>
#include <string>

#include "bgmv/cuda_plan_launch.h"
#include "bgmv/plan_impl.h"
#include "core/check.h"
#include "core/cuda_util.h"
#include "core/kernel_registry.h"

namespace cakemoe {
namespace bgmv {
namespace detail {
namespace {

constexpr int kPortableMinCapability = 80;
constexpr uintptr_t kCakeAlignment = 16;

int dtype_code(DType d) { return d == DType::kBF16 ? 0 : 1; }

void require_aligned(const TensorView& t, const std::string& name) {
  core::require(reinterpret_cast<uintptr_t>(t.data) % kCakeAlignment == 0, name,
                "the Cake kernels need 16-byte aligned device memory, got " + t.describe());
}

const core::KernelUnit& unit_or_throw(const std::string& stage, const std::string& variant,
                                      Arch arch) {
  const core::KernelUnit* unit =
      core::find_kernel_unit("bgmv", stage, variant, 0, arch == Arch::kSm90a);
  core::require_supported(unit != nullptr, "device",
                          "this build has no BGMV '" + stage + "' kernel unit for '" + variant +
                              "' (CAKEMOE_KERNELS / gencode)");
  return *unit;
}

Tensor device_zeros(const std::vector<int64_t>& shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  core::zero_synchronously({t});
  return t;
}

void fill_portable(const BgmvPlan::Impl& impl, PortableParams& pp) {
  const ProblemShape& s = impl.shape;
  validate_portable_limits(s);  // also checked by prepare, before anything is allocated
  pp.dtype = dtype_code(s.dtype);
  pp.S = static_cast<int>(s.num_slices);
  pp.x = impl.x.data;
  for (int64_t i = 0; i < s.num_slices; ++i) {
    pp.lora_a[i] = impl.lora_a[i].data;
    pp.lora_b[i] = impl.lora_b[i].data;
  }
  pp.sorted_token_ids = impl.sorted_token_ids.ptr<const int64_t>();
  pp.expert_ids = impl.expert_ids.ptr<const int64_t>();
  pp.lora_indices = impl.lora_indices.ptr<const int64_t>();
  pp.topk_weights = impl.topk_weights.ptr<const float>();
  pp.shrink_out = impl.shrink_out.data;
  pp.y = impl.y_accum.ptr<float>();
  pp.T = s.num_tokens;
  pp.H = s.hidden;
  pp.F = s.feat_out;
  pp.R = s.rank;
  pp.P = s.num_pairs;
  pp.L = s.num_loras;
  pp.E = s.num_experts;
}

void fill_cake(const BgmvPlan::Impl& impl, CakeParams& cp) {
  for (const auto& named :
       {std::make_pair("x", &impl.x), std::make_pair("lora_a_weights[0]", &impl.lora_a[0]),
        std::make_pair("lora_b_weights[0]", &impl.lora_b[0]),
        std::make_pair("shrink_out", &impl.shrink_out), std::make_pair("y_accum", &impl.y_accum)}) {
    require_aligned(*named.second, named.first);
  }
  core::require(impl.y_accum.strides[0] % 4 == 0, "y_accum",
                "the Cake kernels need a row stride that is a multiple of 4 elements, got " +
                    std::to_string(impl.y_accum.strides[0]));
  cp = cake_params(impl);
}

void fill_grouped(BgmvPlan::Impl& impl, CudaPlan::Launch& launch, Arch arch) {
  const ProblemShape& s = impl.shape;
  const GroupedGeometry& geo = impl.choice.geometry;
  const GroupedWorkspace gw =
      grouped_workspace(s.num_pairs, s.num_tokens, s.num_loras, s.num_experts, s.hidden);
  impl.group_workspace = device_zeros({gw.int_words}, DType::kInt32, s.device);
  impl.group_partials = Tensor::empty({gw.partial_floats}, DType::kFP32, s.device);
  const CakeParams& cp = launch.cake;
  GroupedParams& g = launch.grouped;
  g.x = cp.x;
  g.lora_a = cp.lora_a;
  g.lora_b = cp.lora_b;
  g.sorted_token_ids = cp.sorted_token_ids;
  g.expert_ids = cp.expert_ids;
  g.lora_indices = cp.lora_indices;
  g.topk_weights = cp.topk_weights;
  g.shrink_out = cp.shrink_out;
  g.y = cp.y;
  g.y_row_stride = cp.y_row_stride;
  g.workspace = impl.group_workspace.ptr<int32_t>();
  g.partials = impl.group_partials.ptr<float>();
  g.num_tokens = static_cast<int>(s.num_tokens);
  g.hidden = static_cast<int>(s.hidden);
  g.rank = static_cast<int>(s.rank);
  g.num_pairs = static_cast<int>(s.num_pairs);
  g.num_loras = static_cast<int>(s.num_loras);
  g.num_experts = static_cast<int>(s.num_experts);
  g.splits = cp.splits;
  g.hist_ctas = static_cast<int>(gw.hist_ctas);
  g.max_tiles = static_cast<int>(gw.max_tiles);
  g.fused_index = geo.fused_index ? 1 : 0;
  g.stage = geo.stage;
  g.pdl = 1;  // every Cake architecture (SM90, SM100, SM103) has programmatic dependent launch
  g.packed_routes = geo.packed_routes ? 1 : 0;
  g.discard_partials = geo.discard_partials ? 1 : 0;
  launch.grouped_launcher =
      reinterpret_cast<GroupedLauncher>(unit_or_throw("grouped", dtype_name(s.dtype), arch).launch);
}

void fill_order(BgmvPlan::Impl& impl, CudaPlan::Launch& launch, Arch arch) {
  const ProblemShape& s = impl.shape;
  impl.order_workspace =
      device_zeros({order_workspace_words(s.num_pairs)}, DType::kInt32, s.device);
  OrderBuildParams& o = launch.order;
  o.sorted_token_ids = launch.cake.sorted_token_ids;
  o.expert_ids = launch.cake.expert_ids;
  o.lora_indices = launch.cake.lora_indices;
  o.order = impl.order_workspace.ptr<int32_t>();
  o.num_tokens = static_cast<int>(s.num_tokens);
  o.num_pairs = static_cast<int>(s.num_pairs);
  o.num_loras = static_cast<int>(s.num_loras);
  o.num_experts = static_cast<int>(s.num_experts);
  launch.order_remap = true;
  launch.cake.order = o.order;
  launch.order_launcher =
      reinterpret_cast<OrderBuildLauncher>(unit_or_throw("order_build", "", arch).launch);
}

const core::KernelUnit* specialized_unit(int64_t hidden) {
  // NOTE: portable units (sm_90a/sm_100a/sm_103a) keyed by size = hidden (rank 32 inside).
  const core::KernelUnit* unit =
      core::find_kernel_unit("bgmv", "specialized", "", static_cast<int>(hidden), false);
  return unit != nullptr && unit->size == hidden ? unit : nullptr;
}

void fill_specialized(const BgmvPlan::Impl& impl, CudaPlan::Launch& launch) {
  const int64_t hidden = impl.shape.hidden;
  const core::KernelUnit* unit = specialized_unit(hidden);
  core::require_supported(
      unit != nullptr, "variant",
      "this build has no BGMV 'specialized' kernel unit for hidden_size " + std::to_string(hidden));
  launch.specialized_launcher = reinterpret_cast<CakeUnitLaunch>(unit->launch);
}

}  // namespace

bool specialized_unit_built(int64_t hidden) { return specialized_unit(hidden) != nullptr; }

CakeParams cake_params(const BgmvPlan::Impl& impl) {
  const ProblemShape& s = impl.shape;
  const PlanChoice& c = impl.choice;
  CakeParams cp;
  cp.dtype = dtype_code(s.dtype);
  cp.x = impl.x.data;
  cp.lora_a = impl.lora_a[0].data;
  cp.lora_b = impl.lora_b[0].data;
  cp.sorted_token_ids = impl.sorted_token_ids.ptr<const int64_t>();
  cp.expert_ids = impl.expert_ids.ptr<const int64_t>();
  cp.lora_indices = impl.lora_indices.ptr<const int64_t>();
  cp.topk_weights = impl.topk_weights.ptr<const float>();
  cp.shrink_out = impl.shrink_out.data;
  cp.y = impl.y_accum.ptr<float>();
  cp.y_row_stride = impl.y_accum.strides[0];
  cp.route_index = impl.route_index.ptr<uint32_t>();
  cp.T = s.num_tokens;
  cp.H = s.hidden;
  cp.R = s.rank;
  cp.P = s.num_pairs;
  cp.L = s.num_loras;
  cp.E = s.num_experts;
  // NOTE: the specialized variant has no shrink_launch (spec §1); its unit ignores the kind.
  cp.shrink = c.shrink_launch ? c.shrink_launch->kind : ShrinkKind::kRing2Stage;
  cp.splits = c.shrink_splits;
  cp.schedule_id = c.schedule_id.value_or(0);
  cp.pdl_mode = c.launch_pdl_mode;
  return cp;
}

DeviceFacts query_cuda_device(Device device) {
  const int count = core::cuda_device_count();
  core::require_supported(device.index >= 0 && device.index < count, "device",
                          "x is on cuda:" + std::to_string(device.index) + " but " +
                              std::to_string(count) +
                              " CUDA device(s) are visible to this build; the portable "
                              "fallback also requires CUDA tensors");
  const int cc = core::cuda_capability(device.index);
  DeviceFacts facts;
  facts.capability = Capability{cc / 10, cc % 10};
  facts.num_sms = core::cuda_sm_count(device.index);
  facts.native_code_loads = core::cuda_native_code_loads(device.index);
  return facts;
}

void setup_cuda_plan(BgmvPlan::Impl& impl, Arch arch) {
  auto launch = std::make_unique<CudaPlan::Launch>();
  const PlanChoice& c = impl.choice;
  if (c.variant == Variant::kPortable) {
    const Capability cap = query_cuda_device(impl.shape.device).capability;
    core::require_supported(cap.major * 10 + cap.minor >= kPortableMinCapability, "device",
                            "the portable BGMV kernels need compute capability >= 8.0, got " +
                                std::to_string(cap.major) + "." + std::to_string(cap.minor));
    // NOTE: before anything is allocated: a device without native code in this build runs the
    // portable pair only from its compute_80 PTX.
    if (arch == Arch::kOther) {
      for (const char* stage : {"portable_shrink", "portable_expand"}) {
        core::require_supported(
            core::kernel_unit_has_ptx(unit_or_throw(stage, "", arch)), "device",
            "this build has no compute_80 PTX for the portable BGMV kernels, so a compute "
            "capability " +
                std::to_string(cap.major) + "." + std::to_string(cap.minor) +
                " device cannot run them: rebuild with CAKEMOE_PORTABLE_PTX=ON (the default)");
      }
    }
    launch->path = CudaPath::kPortable;
    fill_portable(impl, launch->portable);
    launch->portable.pdl = cap.major >= 9 ? 1 : 0;  // griddepcontrol: SM90 and later
  } else {
    fill_cake(impl, launch->cake);
    if (c.variant == Variant::kSpecialized) {
      launch->path = CudaPath::kCakeSpecialized;
      fill_specialized(impl, *launch);
    } else if (c.grouped) {
      launch->path = CudaPath::kCakeGrouped;
      fill_grouped(impl, *launch, arch);
    } else {
      launch->path = CudaPath::kCakePerRoute;
      if (c.order_remap) fill_order(impl, *launch, arch);
    }
  }
  impl.cuda = std::make_unique<CudaPlan>(impl.shape.device.index);
  impl.cuda->set_launch(std::move(launch));
}

}  // namespace detail
}  // namespace bgmv
}  // namespace cakemoe
