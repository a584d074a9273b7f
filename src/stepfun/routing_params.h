// Launch parameters of the bitwise StepFun stages (routing, requant, finalize) and the launcher
// signatures of their kernel units. Plain C++ PODs: the binders (cuda_routing.cpp, g++) fill them,
// the inst/ units (nvcc) launch them. Every pointer is device memory.
#pragma once

#include <cstdint>

#include "cakemoe/stepfun.h"
#include "cakemoe/tensor.h"

namespace cakemoe {
namespace stepfun {

/// Routing with T <= this runs as one launch of one CTA (RoutingParams::num_chunks == 0).
constexpr int kRoutingSingleMaxTokens = 32;

/// Routing (spec §2.2-§2.5). Sizes are validated by the caller; the binder picks the path.
struct RoutingParams {
  // Inputs: exactly one of logits / topk_ids.
  const void* logits = nullptr;         ///< [T, E] bf16 bits or fp32
  bool logits_fp32 = false;
  const int32_t* topk_ids = nullptr;    ///< [T, K] global ids (UnpackedPrecomputed)
  // FromLogits outputs (the tables read the ids back from topk_packed).
  uint16_t* topk_weights = nullptr;     ///< [T, K] bf16 bits
  int32_t* topk_packed = nullptr;       ///< [T, K]
  // Tables (spec §2.4).
  int32_t* expanded_idx_to_permuted_idx = nullptr;  ///< [T*K]
  int32_t* permuted_idx_to_token_idx = nullptr;     ///< [p2t_size]
  int32_t* cta_idx_xy_to_batch_idx = nullptr;       ///< [max_ctas]
  int32_t* cta_idx_xy_to_mn_limit = nullptr;        ///< [max_ctas]
  int32_t* num_tokens_per_expert = nullptr;         ///< [E_loc] or nullptr
  int32_t* num_non_exiting_ctas = nullptr;          ///< [1]
  int32_t* total_num_padded_tokens = nullptr;       ///< [1]
  /// Caller scratch (expert_count_histogram, >= 2*E): [0, E_loc) counts, [E_loc, 2E_loc) CTA
  /// offsets.
  int32_t* histogram = nullptr;
  /// Bind-time workspace of the multi-CTA path: [num_chunks, E_loc] per-chunk counts/offsets.
  int32_t* chunk_counts = nullptr;
  // Sizes.
  int32_t num_tokens = 0;           ///< T
  int32_t top_k = 0;                ///< K (<= 32)
  int32_t num_experts = 0;          ///< E (global)
  int32_t local_expert_offset = 0;  ///< off
  int32_t local_num_experts = 0;    ///< E_loc
  int32_t tile = 8;
  int32_t max_ctas = 0;             ///< §2.5 bound with the global E
  int32_t p2t_end = 0;              ///< min(p2t numel, max_padded + 1): end of the p2t tail
  int32_t num_chunks = 0;           ///< multi-CTA path: chunks of the expanded indices (0: single)
  int32_t chunk_size = 0;           ///< expanded indices per chunk (a multiple of 32)
  float routed_scaling_factor = 1.0f;
  bool scaled = false;              ///< routed_scaling_factor != 1.0 (deviation 4)
  bool poison_tail = false;
};

/// Per-token NVFP4 requant (spec §6).
struct RequantParams {
  const uint16_t* input = nullptr;  ///< bf16 [rows, cols]
  const int32_t* expanded_idx_to_permuted_idx = nullptr;
  uint8_t* output = nullptr;        ///< [rows, cols/2] packed e2m1
  uint8_t* output_scale = nullptr;  ///< e4m3 SF in `sf_layout`
  float* per_token_scale = nullptr; ///< [rows]
  int64_t rows = 0;
  int64_t cols = 0;                 ///< I, a multiple of 16
  int64_t num_expanded = 0;         ///< entries of expanded_idx_to_permuted_idx to visit
  SfLayout sf_layout = SfLayout::kR8C4;
  float global_scale_inv = 0.0f;    ///< float(global_scale_inv), rounded once on the host
};

/// Finalize (spec §7.2).
struct FinalizeParams {
  const uint16_t* gemm2_output = nullptr;  ///< bf16 [gemm2_rows, H]
  const void* expert_weights = nullptr;    ///< [T, K] bf16 bits or fp32
  bool weights_fp32 = false;
  const int32_t* expanded_idx_to_permuted_idx = nullptr;  ///< [T*K]
  uint16_t* output = nullptr;              ///< bf16 [T, H]
  int64_t num_tokens = 0;
  int64_t top_k = 0;
  int64_t hidden = 0;
  int64_t gemm2_rows = 0;
};

/// Launchers of the units "routing", "requant", "finalize" (variant "", size 0). Each enqueues its
/// kernels on `stream` and throws CudaError when a launch fails; none allocates or syncs.
using RoutingLauncher = void (*)(const RoutingParams& params, Stream stream);
using RequantLauncher = void (*)(const RequantParams& params, Stream stream);
using FinalizeLauncher = void (*)(const FinalizeParams& params, Stream stream);

}  // namespace stepfun
}  // namespace cakemoe
