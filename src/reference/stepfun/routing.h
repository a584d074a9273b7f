// CPU reference of StepFun Renormalize routing (spec stepfun §2.1-§2.3): top-k selection on the
// raw logits, fp32 softmax over the K selected values, bf16 weights and packed (id, weight) words.
// This is the bitwise oracle of the GPU routers; see docs/decisions/routing.md.
#pragma once

#include <cstdint>
#include <vector>

#include "cakemoe/dtype.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

/// One routing problem. Sizes follow spec notation: T, K, E (global), off, E_loc, tile.
struct RoutingConfig {
  int64_t num_tokens = 0;              ///< T
  int64_t top_k = 0;                   ///< K
  int64_t num_experts = 0;             ///< E, global expert count (sizes buffers, spec §2.5)
  int64_t local_expert_offset = 0;     ///< off
  int64_t local_num_experts = 0;       ///< E_loc
  int64_t tile = 8;                    ///< tile_tokens_dim
  double routed_scaling_factor = 1.0;  ///< FromLogits only (cakemoe deviation 4)
  bool poison_tail = false;            ///< poison_routing_tail: poison instead of benign tail
};

/// Throws InvalidArgument unless 0 <= T <= kMaxNumTokens, 1 <= K <= E <= 65535, E_loc > 0,
/// off >= 0, off + E_loc <= E and tile > 0 (the reference relies on these to stay in bounds).
void check_routing_config(const RoutingConfig& config);

/// Throws InvalidArgument("topk_ids") unless the K ids of every token that name an expert
/// (`0 <= id < num_experts`) are distinct (spec §2.2); `ids` is [T, K] row-major. Ids outside
/// that range are routed nowhere (spec §2.3: non-local), so they may repeat: the EP layer marks
/// stale rows with -1 in every route.
void check_distinct_topk_ids(const int32_t* ids, int64_t num_tokens, int64_t top_k,
                             int64_t num_experts);

/// Order-preserving 32-bit key of a logit (larger key = larger logit; spec §2.2 step 1).
/// NOTE: a total order on bit patterns: -0 < +0, +NaN above +inf, -NaN below -inf.
uint32_t logit_key_fp32(float value);
uint32_t logit_key_bf16(uint16_t bits);

/// The K largest keys of one token, descending, ties to the smaller expert index (spec §2.2).
void select_topk(const uint32_t* keys, int64_t num_experts, int64_t top_k, int32_t* ids);

/// Renormalize weights of one token: `selected` holds the K chosen logits (fp32, descending);
/// writes the fp32 weights before the bf16 cast (spec §2.2 step 3, deviation 4 for `scale`):
///   m = selected[0]; e_k = fp32(exp(double(s_k - m))); sum = e_0 + e_1 + ... (fp32, in k order);
///   w_k = e_k / sum; w_k = w_k * float(scale) only when scale != 1.
void softmax_weights(const float* selected, int64_t top_k, double routed_scaling_factor,
                     float* weights);

/// The packed word of spec §2.2 step 4: (id << 16) | bf16 bits.
int32_t pack_topk(int32_t expert_id, uint16_t weight_bf16);

/// FromLogits mode. `logits` is [T, E] row-major of `logits_dtype` (kBF16 bits or kFP32).
/// Each output [T, K] may be nullptr (not written). Caller sizes every buffer to T*K.
void route_from_logits(const RoutingConfig& config, const void* logits, DType logits_dtype,
                       int32_t* topk_ids, uint16_t* topk_weights_bf16, int32_t* topk_packed);

/// Owning result of route_from_logits, for tests and the CPU backend.
struct TopK {
  std::vector<int32_t> ids;        ///< [T*K] global expert ids
  std::vector<uint16_t> weights;   ///< [T*K] bf16 bits
  std::vector<int32_t> packed;     ///< [T*K]
};
TopK route_from_logits(const RoutingConfig& config, const void* logits, DType logits_dtype);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
