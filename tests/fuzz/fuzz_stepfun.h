// StepFun problem dims and the natural (spec §4.2) operand shapes of each family, shared by the
// stage, layer and config entries. All size guesses use wrapping arithmetic: with huge dims the
// natural shapes are garbage, as a careless caller's would be, and the library must reject them.
#pragma once

#include <cstdint>
#include <vector>

#include "cakemoe/stepfun.h"
#include "fuzz_arena.h"
#include "fuzz_input.h"

namespace cakemoe {
namespace fuzz {

struct StepFunProblem {
  stepfun::Family family = stepfun::Family::kBF16;
  int64_t tokens = 0, top_k = 0, experts = 0, offset = 0, local_experts = 0;
  int64_t hidden = 0, inter = 0, tile = 0;
  int64_t rows = 0, ctas = 0;                  ///< spec §2.5 bounds over the local experts
  int64_t routing_rows = 0, routing_ctas = 0;  ///< the same over all experts (routing tables)
};

/// Reads: family, T, K, E, local offset, E_loc, H, I, tile (each one dim()).
StepFunProblem read_problem(FuzzInput& in);

/// prepare_weights step limits: a count selector byte (none, one, one per expert, a byte's worth),
/// a value, and optionally a different last value.
std::vector<float> read_step_limits(FuzzInput& in, int64_t experts);

/// max_ctas / max_padded of spec §2.5, in wrapping arithmetic (never calls the library).
int64_t guess_ctas(int64_t tokens, int64_t top_k, int64_t experts, int64_t tile);

bool is_fp4(stepfun::Family f);
bool has_block_scales(stepfun::Family f);
bool has_output_scalars(stepfun::Family f);

/// Bytes of 128x4- and r8c4-swizzled block scales of a [rows, cols] grid.
int64_t sf_bytes_128x4(int64_t rows, int64_t cols);
int64_t sf_bytes_r8c4(int64_t rows, int64_t cols);
/// Activation block-scale layout bytes for FC1 outputs (r8c4 if tile <= 64 else 128x4).
int64_t act_sf_bytes(const StepFunProblem& p, int64_t rows, int64_t cols);

/// The FC1 operands of the problem's family (weights of E_loc experts).
struct Fc1Operands {
  TensorView hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale;
  TensorView output1_scale_scalar, output1_scale_gate_scalar, gemm1_clamp_limit, per_token_scale;
};
Fc1Operands fc1_operands(const StepFunProblem& p, Arena& arena);

struct Fc2Weights {
  TensorView gemm2_weights, gemm2_weights_scale, output2_scale_scalar;
};
Fc2Weights fc2_weights(const StepFunProblem& p, Arena& arena);

/// An FC1 output (fc1_side) or FC2 input and its block scales, `rows` rows (they differ only for
/// nvfp4_bf16tok: FC1 writes bf16, FC2 reads the requantized e2m1).
struct GemmActivation {
  TensorView data, scale;
};
GemmActivation gemm_activation(const StepFunProblem& p, Arena& arena, int64_t rows, bool fc1_side);

}  // namespace fuzz
}  // namespace cakemoe
