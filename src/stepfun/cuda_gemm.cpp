// CUDA binders of the GEMM stages (FC1 + SwiGLUStep epilogue, FC2): pick the family's kernel unit
// from the registry, capture the device pointers of the validated arguments and return a closure
// that only enqueues the launch (no allocation, no host synchronisation; graph-capturable).
#if defined(CAKEMOE_WITH_CUDA)
#include <cstdint>
#include <string>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/cuda_util.h"
#include "core/kernel_registry.h"
#include "stepfun/catalog.h"
#include "stepfun/cuda_stages.h"
#include "stepfun/gemm_params.h"

namespace cakemoe {
namespace stepfun {

// NOTE: an absent optional view holds no data, so its ptr() is the nullptr the kernels read as
// "not given".

namespace {

/// The registry unit to bind: the one `kernel` names (a Plan's choice), else the device's
/// preferred unit for (stage, family, tile).
const core::KernelUnit& gemm_unit(Stage stage, Family family, int64_t tile, Device device,
                                  const std::string& kernel, int64_t hidden) {
  const Arch arch = arch_of(device);
  const int t = static_cast<int>(tile);
  if (!kernel.empty()) {
    const KernelUnit* named = find_unit_named(kernel, stage, family, t, arch);
    core::require(named != nullptr, "kernel",
                  "'" + kernel + "' is not a " + stage_name(stage) + " unit for family " +
                      family_name(family) + " at tile " + std::to_string(tile) +
                      " that this device runs in this build");
    return *core::find_kernel_unit_by_name(named->name);
  }
  // The device's preferred unit whose shape rule admits the problem (sm90 first on SM90).
  const KernelUnit* unit = preferred_unit(stage, family, t, arch, hidden);
  core::require_supported(unit != nullptr, "family",
                          std::string("no CUDA StepFun ") + stage_name(stage) +
                              " kernel unit for family " + family_name(family) + " at tile " +
                              std::to_string(tile) + " in this build");
  return *core::find_kernel_unit_by_name(unit->name);
}

/// The kernels read 16-byte vectors; every cudaMalloc'd tensor qualifies, offset views may not.
void check_aligned(const TensorView& t, const char* arg) {
  if (!t.defined()) return;
  core::require(reinterpret_cast<uintptr_t>(t.data) % 16 == 0, arg,
                "must start on a 16-byte boundary for the CUDA GEMM kernels, got " + t.describe());
}

GemmTileTables tile_tables(const TensorView& batch, const TensorView& limit,
                           const TensorView& num_ctas, int64_t num_tokens, int64_t top_k,
                           int64_t local_experts, int64_t tile) {
  core::require(tile > 0 && tile <= 65536, "tile_tokens_dim", "must lie in [1, 65536]");
  GemmTileTables t;
  t.batch = batch.ptr<int32_t>();
  t.mn_limit = limit.ptr<int32_t>();
  t.num_non_exiting_ctas = num_ctas.ptr<int32_t>();
  t.tile = tile;
  // NOTE: spec §2.5 DECISION: the grid uses E_loc; CTAs past the live count exit on the device.
  t.max_ctas = max_ctas(num_tokens, top_k, local_experts, tile);
  core::require(t.max_ctas > 0 && t.max_ctas < (int64_t(1) << 31), "tile_tokens_dim",
                "gives " + std::to_string(t.max_ctas) + " token tiles, outside the CUDA grid");
  return t;
}

}  // namespace

CudaEnqueue bind_cuda_fc1(const Fc1Args& a, const GemmDims& dims) {
  core::require(a.tile_tokens_dim > 0 && a.tile_tokens_dim <= 65536, "tile_tokens_dim",
                "must lie in [1, 65536]");
  const core::KernelUnit& unit =
      gemm_unit(Stage::kFc1, a.family, a.tile_tokens_dim, a.hidden_states.device, a.kernel,
                dims.hidden);
  for (const auto& [t, arg] : {std::make_pair(&a.hidden_states, "hidden_states"),
                               std::make_pair(&a.gemm1_weights, "gemm1_weights"),
                               std::make_pair(&a.gemm1_output, "gemm1_output")}) {
    check_aligned(*t, arg);
  }
  Fc1Params p;
  p.hidden_states = a.hidden_states.data;
  p.hidden_states_scale = a.hidden_states_scale.ptr<uint8_t>();
  p.per_token_scale = a.per_token_scale.ptr<float>();
  p.permuted_idx_to_token_idx = a.permuted_idx_to_token_idx.ptr<int32_t>();
  p.weights = a.gemm1_weights.data;
  p.weights_scale = a.gemm1_weights_scale.ptr<uint8_t>();
  p.scale_c = a.output1_scale_scalar.ptr<float>();
  p.scale_gate = a.output1_scale_gate_scalar.ptr<float>();
  p.clamp_limit = a.gemm1_clamp_limit.ptr<float>();
  p.num_tokens = a.hidden_states.shape[0];
  p.tables = tile_tables(a.cta_idx_xy_to_batch_idx, a.cta_idx_xy_to_mn_limit,
                         a.num_non_exiting_ctas, p.num_tokens, a.top_k, dims.num_local_experts,
                         a.tile_tokens_dim);
  p.output = a.gemm1_output.data;
  p.output_scale = a.gemm1_output_scale.ptr<uint8_t>();
  p.output_scale_layout = act_sf_layout(a.tile_tokens_dim);
  p.hidden = dims.hidden;
  p.intermediate = dims.intermediate;
  p.num_experts = dims.num_local_experts;
  return reinterpret_cast<Fc1Binder>(unit.launch)(p);
}

CudaEnqueue bind_cuda_fc2(const Fc2Args& a, const GemmDims& dims) {
  core::require(a.tile_tokens_dim > 0 && a.tile_tokens_dim <= 65536, "tile_tokens_dim",
                "must lie in [1, 65536]");
  const core::KernelUnit& unit =
      gemm_unit(Stage::kFc2, a.family, a.tile_tokens_dim, a.gemm2_input.device, a.kernel,
                dims.hidden);
  for (const auto& [t, arg] : {std::make_pair(&a.gemm2_input, "gemm2_input"),
                               std::make_pair(&a.gemm2_weights, "gemm2_weights"),
                               std::make_pair(&a.gemm2_output, "gemm2_output")}) {
    check_aligned(*t, arg);
  }
  Fc2Params p;
  p.input = a.gemm2_input.data;
  p.input_scale = a.gemm2_input_scale.ptr<uint8_t>();
  p.input_scale_layout = act_sf_layout(a.tile_tokens_dim);
  p.per_token_scale = a.per_token_scale.ptr<float>();
  p.weights = a.gemm2_weights.data;
  p.weights_scale = a.gemm2_weights_scale.ptr<uint8_t>();
  p.output_scale = a.output2_scale_scalar.ptr<float>();
  p.tables = tile_tables(a.cta_idx_xy_to_batch_idx, a.cta_idx_xy_to_mn_limit,
                         a.num_non_exiting_ctas, a.num_tokens, a.top_k, dims.num_local_experts,
                         a.tile_tokens_dim);
  p.output = a.gemm2_output.ptr<uint16_t>();
  p.hidden = dims.hidden;
  p.intermediate = dims.intermediate;
  p.num_experts = dims.num_local_experts;
  return reinterpret_cast<Fc2Binder>(unit.launch)(p);
}

}  // namespace stepfun
}  // namespace cakemoe
#endif
