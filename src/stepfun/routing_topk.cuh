// StepFun Renormalize top-k of one token by one warp (spec stepfun §2.2), bitwise equal to
// reference::stepfun::route_from_logits (docs/decisions/routing.md, GPU parity checklist 1-2).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"
#include "formats/codecs.h"
#include "stepfun/routing_params.h"

namespace cakemoe {
namespace stepfun {
namespace routing_kernels {

constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kWarpSize = 32;

/// Order-preserving key of fp32 bits (reference logit_key_fp32): a total order on bit patterns.
CAKEMOE_DEVICE uint32_t logit_key(uint32_t fp32_bits) {
  return (fp32_bits & 0x80000000u) ? ~fp32_bits : (fp32_bits | 0x80000000u);
}

/// fp32 bits of logit j of a row (bf16 widened exactly).
CAKEMOE_DEVICE uint32_t logit_bits(const void* row, bool fp32, int j) {
  if (fp32) return __ldg(static_cast<const unsigned int*>(row) + j);
  return static_cast<uint32_t>(__ldg(static_cast<const unsigned short*>(row) + j)) << 16;
}

/// The candidate of expert j: key above, (65535 - j) below, so a larger candidate is a larger key
/// or, on equal keys, the smaller index (spec §2.2 tie rule). Every candidate is >= 1 and unique.
CAKEMOE_DEVICE uint64_t candidate(uint32_t key, int j) {
  return (static_cast<uint64_t>(key) << 16) | static_cast<uint64_t>(65535 - j);
}

/// The largest candidate of this lane's experts (j = lane, lane + 32, ...) strictly below
/// `bound`; 0 when there is none.
CAKEMOE_DEVICE uint64_t lane_best_below(const void* row, bool fp32, int num_experts, int lane,
                                        uint64_t bound) {
  uint64_t best = 0;
  for (int j = lane; j < num_experts; j += kWarpSize) {
    const uint64_t v = candidate(logit_key(logit_bits(row, fp32, j)), j);
    if (v < bound && v > best) best = v;
  }
  return best;
}

/// The warp's largest candidate (all 32 lanes must call): the high words by one warp reduction,
/// then the low words of the lanes holding that high word by a second (sm_80 redux.sync).
CAKEMOE_DEVICE uint64_t warp_max_candidate(uint64_t v) {
  const uint32_t hi = static_cast<uint32_t>(v >> 32), lo = static_cast<uint32_t>(v);
  const uint32_t top = __reduce_max_sync(kFullMask, hi);
  const uint32_t low = __reduce_max_sync(kFullMask, hi == top ? lo : 0u);
  return (static_cast<uint64_t>(top) << 32) | low;
}

/// The K best candidates of a row, lane k receiving the k-th (descending). Each lane keeps its
/// best candidate below the last winner; only the lane that owned the winner looks again (its
/// logits come back from L1). NOTE: a register-resident form (E / 32 candidates per lane, loaded
/// once) measured the same on the H200 with twice the code (docs/performance/stepfun.md).
CAKEMOE_DEVICE uint64_t select_top_k(const void* row, bool fp32, int num_experts, int top_k,
                                     int lane) {
  uint64_t mine = lane_best_below(row, fp32, num_experts, lane, ~0ull);
  uint64_t kth = 0;
  for (int k = 0; k < top_k; ++k) {
    const uint64_t winner = warp_max_candidate(mine);
    if (lane == k) kth = winner;
    if (mine == winner) mine = lane_best_below(row, fp32, num_experts, lane, winner);
  }
  return kth;
}

/// fp32 bits of a candidate's logit (logit_key inverted).
CAKEMOE_DEVICE uint32_t candidate_logit_bits(uint64_t cand) {
  const uint32_t key = static_cast<uint32_t>(cand >> 16);
  return (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
}

/// Routes token t with the whole warp (all 32 lanes must call): selects the K best experts in
/// descending order, computes the Renormalize weights and writes topk_weights / topk_packed.
CAKEMOE_DEVICE void route_token_warp(const RoutingParams& p, int t, int lane) {
  const int num_experts = p.num_experts;
  const int top_k = p.top_k;
  const int64_t row_bytes = static_cast<int64_t>(num_experts) * (p.logits_fp32 ? 4 : 2);
  const void* row = static_cast<const char*>(p.logits) + static_cast<int64_t>(t) * row_bytes;
  const uint64_t kth = select_top_k(row, p.logits_fp32, num_experts, top_k, lane);
  const int my_id = 65535 - static_cast<int>(kth & 0xFFFFu);

  // Softmax over the selected values, lane k holding s_k (reference softmax_weights).
  const bool active = lane < top_k;
  const float s = active ? __uint_as_float(candidate_logit_bits(kth)) : 0.0f;
  const float m = __shfl_sync(kFullMask, s, 0);  // s_0 is the maximum in key order
  // NOTE: e_k = fp32(exp(double(s_k - m))), as the reference (docs/decisions/routing.md).
  const float e = active ? static_cast<float>(::exp(static_cast<double>(__fsub_rn(s, m)))) : 0.0f;
  float sum = 0.0f;
  for (int k = 0; k < top_k; ++k) sum = __fadd_rn(sum, __shfl_sync(kFullMask, e, k));  // k order
  if (!active) return;
  float w = __fdiv_rn(e, sum);
  if (p.scaled) w = __fmul_rn(w, p.routed_scaling_factor);  // deviation 4, after the division
  const uint16_t w_bf16 = formats::bf16_from_float(w);
  const int64_t o = static_cast<int64_t>(t) * top_k + lane;
  p.topk_weights[o] = w_bf16;
  p.topk_packed[o] = static_cast<int32_t>((static_cast<uint32_t>(my_id) << 16) | w_bf16);
}

}  // namespace routing_kernels
}  // namespace stepfun
}  // namespace cakemoe
