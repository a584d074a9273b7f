#include "stepfun/cpu_gemm.h"

#include <algorithm>

#include "reference/stepfun/fc1.h"
#include "reference/stepfun/fc2.h"

namespace cakemoe {
namespace stepfun {
namespace ref = reference::stepfun;

// NOTE: an absent optional view holds no data, so its ptr() is the nullptr the engines read as
// "not given".

namespace {

ref::GemmTables tables_of(const TensorView& p2t, const TensorView& batch, const TensorView& limit,
                          const TensorView& num_ctas, int64_t tile) {
  ref::GemmTables t;
  t.permuted_idx_to_token_idx = p2t.ptr<int32_t>();
  t.cta_idx_xy_to_batch_idx = batch.ptr<int32_t>();
  t.cta_idx_xy_to_mn_limit = limit.ptr<int32_t>();
  t.num_non_exiting_ctas = *num_ctas.ptr<int32_t>();  // host tensor: the live device scalar
  t.cta_table_entries = std::min(batch.numel(), limit.numel());
  t.tile = tile;
  return t;
}

}  // namespace

void cpu_fc1(const Fc1Args& a, const GemmDims& dims) {
  ref::Fc1Problem p;
  p.family = a.family;
  p.num_tokens = a.hidden_states.shape[0];
  p.hidden = dims.hidden;
  p.intermediate = dims.intermediate;
  p.num_experts = dims.num_local_experts;
  p.hidden_states = a.hidden_states.data;
  p.hidden_states_scale = a.hidden_states_scale.ptr<uint8_t>();
  p.per_token_scale = a.per_token_scale.ptr<float>();
  p.gemm1_weights = a.gemm1_weights.data;
  p.gemm1_weights_scale = a.gemm1_weights_scale.ptr<uint8_t>();
  p.output1_scale_scalar = a.output1_scale_scalar.ptr<float>();
  p.output1_scale_gate_scalar = a.output1_scale_gate_scalar.ptr<float>();
  p.gemm1_clamp_limit = a.gemm1_clamp_limit.ptr<float>();
  p.tables = tables_of(a.permuted_idx_to_token_idx, a.cta_idx_xy_to_batch_idx,
                       a.cta_idx_xy_to_mn_limit, a.num_non_exiting_ctas, a.tile_tokens_dim);
  p.gemm1_output = a.gemm1_output.data;
  p.gemm1_output_scale = a.gemm1_output_scale.ptr<uint8_t>();
  p.output_scale_layout = act_sf_layout(a.tile_tokens_dim);
  // NOTE: valid rows index gemm1_output and permuted_idx_to_token_idx: bound by both.
  p.output_rows = std::min(a.gemm1_output.shape[0], a.permuted_idx_to_token_idx.numel());
  ref::fc1(p);
}

void cpu_fc2(const Fc2Args& a, const GemmDims& dims) {
  ref::Fc2Problem p;
  p.family = a.family;
  p.hidden = dims.hidden;
  p.intermediate = dims.intermediate;
  p.num_experts = dims.num_local_experts;
  p.gemm2_input = a.gemm2_input.data;
  p.gemm2_input_scale = a.gemm2_input_scale.ptr<uint8_t>();
  p.input_scale_layout = act_sf_layout(a.tile_tokens_dim);
  p.per_token_scale = a.per_token_scale.ptr<float>();
  p.gemm2_weights = a.gemm2_weights.data;
  p.gemm2_weights_scale = a.gemm2_weights_scale.ptr<uint8_t>();
  p.output2_scale_scalar = a.output2_scale_scalar.ptr<float>();
  p.tables = tables_of(TensorView(), a.cta_idx_xy_to_batch_idx, a.cta_idx_xy_to_mn_limit,
                       a.num_non_exiting_ctas, a.tile_tokens_dim);
  p.gemm2_output = a.gemm2_output.ptr<uint16_t>();
  // NOTE: valid rows index gemm2_input, gemm2_output and (nvfp4_bf16tok) per_token_scale.
  p.rows = std::min(a.gemm2_output.shape[0], a.gemm2_input.shape[0]);
  if (a.per_token_scale.defined()) p.rows = std::min(p.rows, a.per_token_scale.numel());
  ref::fc2(p);
}

}  // namespace stepfun
}  // namespace cakemoe
