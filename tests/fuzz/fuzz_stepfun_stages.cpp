// StepFun per-stage entries (spec §9.1): routing, fc1, requant, fc2, finalize, each through
// prepare_<stage> (+ launch) or the one-shot. Byte layouts: see each function's first lines.
#include <algorithm>

#include "cakemoe/stepfun.h"
#include "fuzz_entries.h"
#include "fuzz_stepfun.h"

namespace cakemoe {
namespace fuzz {

using namespace stepfun;  // NOLINT: every name here is the API under test

namespace {

/// Multiply-adds per row of a GEMM whose weight view is `w` ([E, ...]): its per-expert numel.
int64_t per_expert_numel(const TensorView& w) {
  const int64_t n = claimed_numel(w), e = claimed_rows(w);
  return e > 0 ? n / e : n;
}

/// The [1] int32 scalar input: content dim(), then its flag byte.
TensorView int_scalar(FuzzInput& in, Arena& arena) {
  const int64_t value = in.dim();
  return arena.view(DType::kInt32, {1}, const_fill(value));
}

}  // namespace

// problem, how, stream, mode byte (bit 0 precomputed ids, bit 1 fp32), scaling factor, pdl, poison,
// then the twelve tensors in RoutingArgs order.
void fuzz_routing(FuzzInput& in, Arena& arena) {
  const StepFunProblem p = read_problem(in);
  const int how = in.byte();
  const Stream stream = any_stream(in);
  const uint8_t mode = in.byte();
  const bool by_ids = mode & 1, fp32 = mode & 2;
  RoutingArgs a;
  a.num_experts = p.experts;
  a.top_k = p.top_k;
  a.local_expert_offset = p.offset;
  a.local_num_experts = p.local_experts;
  a.tile_tokens_dim = p.tile;
  a.routed_scaling_factor = in.scalar();
  a.enable_pdl = in.flag();
  a.poison_routing_tail = in.flag();
  const int64_t t = p.tokens, k = p.top_k, e = p.experts;
  const DType logits_dtype = fp32 ? DType::kFP32 : DType::kBF16;
  a.routing_logits = arena.view(logits_dtype, {t, e}, float_fill(), !by_ids);
  a.topk_ids = arena.view(DType::kInt32, {t, k}, index_fill(0, e), by_ids);
  a.topk_weights = arena.view(by_ids ? logits_dtype : DType::kBF16, {t, k}, float_fill());
  a.topk_packed = arena.view(DType::kInt32, {t, k}, const_fill(-1), !by_ids);
  a.expert_count_histogram =
      arena.view(DType::kInt32, {std::max<int64_t>(wrap_mul(2, e), 512)}, const_fill(-1));
  a.total_num_padded_tokens = arena.view(DType::kInt32, {1}, const_fill(-1));
  a.expanded_idx_to_permuted_idx = arena.view(DType::kInt32, {wrap_mul(t, k)}, const_fill(-1));
  a.permuted_idx_to_token_idx = arena.view(DType::kInt32, {p.routing_rows}, const_fill(-1));
  a.cta_idx_xy_to_batch_idx = arena.view(DType::kInt32, {p.routing_ctas}, const_fill(-1));
  a.cta_idx_xy_to_mn_limit = arena.view(DType::kInt32, {p.routing_ctas}, const_fill(-1));
  a.num_non_exiting_ctas = arena.view(DType::kInt32, {1}, const_fill(-1));
  a.num_tokens_per_expert = arena.view(DType::kInt32, {p.local_experts}, const_fill(-1), false);
  const bool can = affordable({t, wrap_add(e, k)}) && affordable({p.routing_rows});
  exercise(
      how, can, stream, [&] { return prepare_routing(a); }, [&](Stream s) { routing(a, s); });
}

// problem, how, stream, pdl, then the FC1 operands, the routing tables (num_non_exiting_ctas and
// total_num_padded_tokens contents are dims read just before their flag bytes) and the output.
void fuzz_fc1(FuzzInput& in, Arena& arena) {
  const StepFunProblem p = read_problem(in);
  const int how = in.byte();
  const Stream stream = any_stream(in);
  Fc1Args a;
  a.family = p.family;
  a.top_k = p.top_k;
  a.tile_tokens_dim = p.tile;
  a.enable_pdl = in.flag();
  const Fc1Operands o = fc1_operands(p, arena);
  a.hidden_states = o.hidden_states;
  a.hidden_states_scale = o.hidden_states_scale;
  a.gemm1_weights = o.gemm1_weights;
  a.gemm1_weights_scale = o.gemm1_weights_scale;
  a.output1_scale_scalar = o.output1_scale_scalar;
  a.output1_scale_gate_scalar = o.output1_scale_gate_scalar;
  a.gemm1_clamp_limit = o.gemm1_clamp_limit;
  a.per_token_scale = o.per_token_scale;
  a.permuted_idx_to_token_idx = arena.view(DType::kInt32, {p.rows}, index_fill(0, p.tokens));
  a.cta_idx_xy_to_batch_idx = arena.view(DType::kInt32, {p.ctas}, index_fill(0, p.local_experts));
  a.cta_idx_xy_to_mn_limit = arena.view(DType::kInt32, {p.ctas}, step_fill(p.tile, p.rows));
  a.num_non_exiting_ctas = int_scalar(in, arena);
  a.total_num_padded_tokens = int_scalar(in, arena);
  const GemmActivation out = gemm_activation(p, arena, p.rows, true);
  a.gemm1_output = out.data;
  a.gemm1_output_scale = out.scale;
  const bool can = affordable({claimed_rows(a.gemm1_output), per_expert_numel(a.gemm1_weights)});
  exercise(
      how, can, stream, [&] { return prepare_fc1(a); }, [&](Stream s) { fc1(a, s); });
}

// rows, I, T*K, sf_layout, global_scale_inv, how, stream, pdl, then the five tensors.
void fuzz_requant(FuzzInput& in, Arena& arena) {
  const int64_t rows = in.dim(), inter = in.dim(), pairs = in.dim();
  RequantArgs a;
  a.sf_layout = in.pick_enum<SfLayout>(3);
  a.global_scale_inv = in.scalar();
  const int how = in.byte();
  const Stream stream = any_stream(in);
  a.enable_pdl = in.flag();
  int64_t sf = wrap_mul(rows, inter / 16);
  if (a.sf_layout == SfLayout::kR8C4) sf = sf_bytes_r8c4(rows, inter / 16);
  if (a.sf_layout == SfLayout::kR128C4) sf = sf_bytes_128x4(rows, inter / 16);
  a.gemm1_output = arena.view(DType::kBF16, {rows, inter}, float_fill(4.0f));
  a.expanded_idx_to_permuted_idx = arena.view(DType::kInt32, {pairs}, index_fill(0, rows));
  a.output = arena.view(DType::kE2M1x2, {rows, inter / 2}, const_fill(0));
  a.output_scale = arena.view(DType::kE4M3, {sf}, const_fill(0));
  a.per_token_scale = arena.view(DType::kFP32, {rows}, float_fill());
  const bool can = affordable({claimed_numel(a.gemm1_output)});
  exercise(
      how, can, stream, [&] { return prepare_requant(a); }, [&](Stream s) { requant(a, s); });
}

// problem, how, stream, pdl, then the FC2 input, weights, per-token scales, tables and output.
void fuzz_fc2(FuzzInput& in, Arena& arena) {
  const StepFunProblem p = read_problem(in);
  const int how = in.byte();
  const Stream stream = any_stream(in);
  Fc2Args a;
  a.family = p.family;
  a.num_tokens = p.tokens;
  a.top_k = p.top_k;
  a.tile_tokens_dim = p.tile;
  a.enable_pdl = in.flag();
  const GemmActivation input = gemm_activation(p, arena, p.rows, false);
  a.gemm2_input = input.data;
  a.gemm2_input_scale = input.scale;
  const Fc2Weights w = fc2_weights(p, arena);
  a.gemm2_weights = w.gemm2_weights;
  a.gemm2_weights_scale = w.gemm2_weights_scale;
  a.output2_scale_scalar = w.output2_scale_scalar;
  a.per_token_scale =
      arena.view(DType::kFP32, {p.rows}, float_fill(), p.family == Family::kNVFP4BF16Tok);
  a.cta_idx_xy_to_batch_idx = arena.view(DType::kInt32, {p.ctas}, index_fill(0, p.local_experts));
  a.cta_idx_xy_to_mn_limit = arena.view(DType::kInt32, {p.ctas}, step_fill(p.tile, p.rows));
  a.num_non_exiting_ctas = int_scalar(in, arena);
  a.gemm2_output = arena.view(DType::kBF16, {p.rows, p.hidden}, const_fill(0));
  const bool can = affordable({claimed_rows(a.gemm2_input), per_expert_numel(a.gemm2_weights)});
  exercise(
      how, can, stream, [&] { return prepare_fc2(a); }, [&](Stream s) { fc2(a, s); });
}

// T, K, H, rows, num_experts, fp32 weights flag, how, stream, pdl, then the five tensors
// (total_num_padded_tokens's content is a dim read before its flag byte).
void fuzz_finalize(FuzzInput& in, Arena& arena) {
  const int64_t t = in.dim(), k = in.dim(), h = in.dim(), rows = in.dim();
  FinalizeArgs a;
  a.num_experts = in.dim();
  const bool fp32 = in.flag();
  const int how = in.byte();
  const Stream stream = any_stream(in);
  a.enable_pdl = in.flag();
  a.gemm2_output = arena.view(DType::kBF16, {rows, h}, float_fill());
  a.expert_weights = arena.view(fp32 ? DType::kFP32 : DType::kBF16, {t, k}, float_fill());
  a.expanded_idx_to_permuted_idx = arena.view(DType::kInt32, {wrap_mul(t, k)}, index_fill(0, rows));
  a.total_num_padded_tokens = int_scalar(in, arena);
  a.output = arena.view(DType::kBF16, {t, h}, const_fill(0));
  const bool can = affordable({t, k, h});
  exercise(
      how, can, stream, [&] { return prepare_finalize(a); }, [&](Stream s) { finalize(a, s); });
}

}  // namespace fuzz
}  // namespace cakemoe
