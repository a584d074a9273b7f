// Launch parameters of the CUDA FC1 / FC2 kernel units (spec stepfun §5, §7.1) and the binder
// signatures they register: core::KernelUnit::launch of a "stepfun" "fc1" unit is an Fc1Binder,
// of an "fc2" unit an Fc2Binder. Plain C++ (read by the host binders in cuda_gemm.cpp).
#pragma once

#include <cstdint>
#include <functional>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {

/// Device tables of spec §2.4 that both GEMM stages read, plus the static grid size.
struct GemmTileTables {
  const int32_t* batch = nullptr;                 ///< cta_idx_xy_to_batch_idx
  const int32_t* mn_limit = nullptr;              ///< cta_idx_xy_to_mn_limit
  const int32_t* num_non_exiting_ctas = nullptr;  ///< [1], read by every CTA
  int64_t tile = 8;                               ///< tile_tokens_dim (any value > 0)
  int64_t max_ctas = 0;                           ///< token tiles launched (spec §2.5, E_loc)
};

/// FC1 (spec §5): device pointers of validated Fc1Args.
struct Fc1Params {
  const void* hidden_states = nullptr;            ///< family input [T, ...]
  const uint8_t* hidden_states_scale = nullptr;   ///< linear block scales (nvfp4*, mxfp8)
  const float* per_token_scale = nullptr;         ///< nvfp4_bf16tok [>= T]
  const int32_t* permuted_idx_to_token_idx = nullptr;
  const void* weights = nullptr;                  ///< physical W1 [E_loc, 2I, H] view
  const uint8_t* weights_scale = nullptr;         ///< 128x4 block scales (nvfp4*, mxfp8)
  const float* scale_c = nullptr;                 ///< output1_scale_scalar (nvfp4*, fp8)
  const float* scale_gate = nullptr;              ///< output1_scale_gate_scalar (nvfp4*, fp8)
  const float* clamp_limit = nullptr;             ///< gemm1_clamp_limit, family units
  GemmTileTables tables;
  void* output = nullptr;                         ///< gemm1_output
  uint8_t* output_scale = nullptr;                ///< gemm1_output_scale (nvfp4, mxfp8)
  SfLayout output_scale_layout = SfLayout::kR8C4;
  int64_t num_tokens = 0;                         ///< T
  int64_t hidden = 0;                             ///< H
  int64_t intermediate = 0;                       ///< I
  int64_t num_experts = 0;                        ///< E_loc
};

/// FC2 (spec §7.1): device pointers of validated Fc2Args.
struct Fc2Params {
  const void* input = nullptr;                    ///< FC1 output (nvfp4_bf16tok: requant output)
  const uint8_t* input_scale = nullptr;           ///< its block scales (nvfp4*, mxfp8)
  SfLayout input_scale_layout = SfLayout::kR8C4;
  const float* per_token_scale = nullptr;         ///< nvfp4_bf16tok, per permuted row
  const void* weights = nullptr;                  ///< physical W2 [E_loc, H, I] view
  const uint8_t* weights_scale = nullptr;
  const float* output_scale = nullptr;            ///< output2_scale_scalar (nvfp4*, fp8)
  GemmTileTables tables;
  uint16_t* output = nullptr;                     ///< gemm2_output bf16 [rows, H]
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t num_experts = 0;
};

/// Enqueues one bound FC1 / FC2 launch on a stream (no allocation, no host synchronisation,
/// graph-capturable); throws CudaError when the launch is rejected.
using GemmEnqueue = std::function<void(Stream)>;

/// What a "stepfun" "fc1" / "fc2" unit registers (core::KernelUnit::launch): binds validated
/// params once (prepare time: tensor maps, kernel attributes) and returns the enqueue closure.
using Fc1Binder = GemmEnqueue (*)(const Fc1Params& params);
using Fc2Binder = GemmEnqueue (*)(const Fc2Params& params);

}  // namespace stepfun
}  // namespace cakemoe
