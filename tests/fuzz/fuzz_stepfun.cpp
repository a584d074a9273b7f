#include "fuzz_stepfun.h"

namespace cakemoe {
namespace fuzz {

using stepfun::Family;

namespace {

int64_t round_up(int64_t x, int64_t to) { return wrap_mul(wrap_add(x, to - 1) / to, to); }

}  // namespace

int64_t guess_ctas(int64_t tokens, int64_t top_k, int64_t experts, int64_t tile) {
  const int64_t pairs = wrap_mul(tokens, top_k);
  const int64_t rest = pairs > experts ? wrap_add(pairs, wrap_mul(experts, -1)) : 0;
  const int64_t t = tile > 0 ? tile : 1;
  return wrap_add(pairs < experts ? pairs : experts, rest / t);
}

StepFunProblem read_problem(FuzzInput& in) {
  StepFunProblem p;
  p.family = in.pick_enum<Family>(5);
  p.tokens = in.dim();
  p.top_k = in.dim();
  p.experts = in.dim();
  p.offset = in.dim();
  p.local_experts = in.dim();
  p.hidden = in.dim();
  p.inter = in.dim();
  p.tile = in.dim();
  p.ctas = guess_ctas(p.tokens, p.top_k, p.local_experts, p.tile);
  p.rows = wrap_mul(p.ctas, p.tile);
  p.routing_ctas = guess_ctas(p.tokens, p.top_k, p.experts, p.tile);
  p.routing_rows = wrap_mul(p.routing_ctas, p.tile);
  return p;
}

bool is_fp4(Family f) { return f == Family::kNVFP4 || f == Family::kNVFP4BF16Tok; }
bool has_block_scales(Family f) { return is_fp4(f) || f == Family::kMXFP8; }
bool has_output_scalars(Family f) { return is_fp4(f) || f == Family::kFP8; }

int64_t sf_bytes_128x4(int64_t rows, int64_t cols) {
  return wrap_mul(round_up(rows, 128), round_up(cols, 4));
}
int64_t sf_bytes_r8c4(int64_t rows, int64_t cols) {
  return wrap_mul(round_up(rows, 8), round_up(cols, 4));
}
int64_t act_sf_bytes(const StepFunProblem& p, int64_t rows, int64_t cols) {
  return p.tile <= 64 ? sf_bytes_r8c4(rows, cols) : sf_bytes_128x4(rows, cols);
}

Fc1Operands fc1_operands(const StepFunProblem& p, Arena& arena) {
  const Family f = p.family;
  const int64_t t = p.tokens, e = p.local_experts, h = p.hidden, two_i = wrap_mul(2, p.inter);
  Fc1Operands o;
  if (is_fp4(f)) {
    o.hidden_states = arena.view(DType::kE2M1x2, {t, h / 2}, byte_fill());
    o.hidden_states_scale = arena.view(DType::kE4M3, {t, h / 16}, byte_fill());
    o.gemm1_weights = arena.view(DType::kE2M1x2, {e, two_i, h / 2}, byte_fill());
    o.gemm1_weights_scale =
        arena.view(DType::kE4M3, {wrap_mul(e, sf_bytes_128x4(two_i, h / 16))}, byte_fill());
  } else if (f == Family::kMXFP8 || f == Family::kFP8) {
    o.hidden_states = arena.view(DType::kE4M3, {t, h}, byte_fill());
    o.hidden_states_scale =
        arena.view(DType::kUE8M0, {t, h / 32}, index_fill(120, 134), f == Family::kMXFP8);
    o.gemm1_weights = arena.view(DType::kE4M3, {e, two_i, h}, byte_fill());
    o.gemm1_weights_scale = arena.view(DType::kUE8M0, {wrap_mul(e, sf_bytes_128x4(two_i, h / 32))},
                                       index_fill(120, 134), f == Family::kMXFP8);
  } else {
    o.hidden_states = arena.view(DType::kBF16, {t, h}, float_fill());
    o.hidden_states_scale = arena.view(DType::kE4M3, {t, h / 16}, byte_fill(), false);
    o.gemm1_weights = arena.view(DType::kBF16, {e, h / 64, two_i, 64}, float_fill(0.1f));
    o.gemm1_weights_scale = arena.view(DType::kE4M3, {e}, byte_fill(), false);
  }
  const bool scalars = has_output_scalars(f);
  o.output1_scale_scalar = arena.view(DType::kFP32, {e}, float_fill(), scalars);
  o.output1_scale_gate_scalar = arena.view(DType::kFP32, {e}, float_fill(), scalars);
  o.gemm1_clamp_limit = arena.view(DType::kFP32, {e}, float_fill(7.0f));
  o.per_token_scale = arena.view(DType::kFP32, {t}, float_fill(), f == Family::kNVFP4BF16Tok);
  return o;
}

Fc2Weights fc2_weights(const StepFunProblem& p, Arena& arena) {
  const Family f = p.family;
  const int64_t e = p.local_experts, h = p.hidden, i = p.inter;
  Fc2Weights w;
  if (is_fp4(f)) {
    w.gemm2_weights = arena.view(DType::kE2M1x2, {e, h, i / 2}, byte_fill());
    w.gemm2_weights_scale =
        arena.view(DType::kE4M3, {wrap_mul(e, sf_bytes_128x4(h, i / 16))}, byte_fill());
  } else if (f == Family::kMXFP8 || f == Family::kFP8) {
    w.gemm2_weights = arena.view(DType::kE4M3, {e, h, i}, byte_fill());
    w.gemm2_weights_scale = arena.view(DType::kUE8M0, {wrap_mul(e, sf_bytes_128x4(h, i / 32))},
                                       index_fill(120, 134), f == Family::kMXFP8);
  } else {
    w.gemm2_weights = arena.view(DType::kBF16, {e, i / 64, h, 64}, float_fill(0.1f));
    w.gemm2_weights_scale = arena.view(DType::kE4M3, {e}, byte_fill(), false);
  }
  w.output2_scale_scalar = arena.view(DType::kFP32, {e}, float_fill(), has_output_scalars(f));
  return w;
}

GemmActivation gemm_activation(const StepFunProblem& p, Arena& arena, int64_t rows, bool fc1_side) {
  const Family f = p.family;
  const bool fp4 = is_fp4(f) && !(f == Family::kNVFP4BF16Tok && fc1_side);
  GemmActivation a;
  if (fp4) {
    a.data = arena.view(DType::kE2M1x2, {rows, p.inter / 2}, byte_fill());
    a.scale = arena.view(DType::kE4M3, {act_sf_bytes(p, rows, p.inter / 16)}, byte_fill());
  } else if (f == Family::kMXFP8 || f == Family::kFP8) {
    a.data = arena.view(DType::kE4M3, {rows, p.inter}, byte_fill());
    a.scale = arena.view(DType::kUE8M0, {act_sf_bytes(p, rows, p.inter / 32)}, index_fill(120, 134),
                         f == Family::kMXFP8);
  } else {
    a.data = arena.view(DType::kBF16, {rows, p.inter}, float_fill());
    a.scale = arena.view(DType::kE4M3, {rows}, byte_fill(), false);
  }
  return a;
}

}  // namespace fuzz
}  // namespace cakemoe
