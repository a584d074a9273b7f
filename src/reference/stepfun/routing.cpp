#include "reference/stepfun/routing.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cakemoe/stepfun.h"
#include "core/check.h"
#include "core/checked.h"
#include "core/parallel.h"
#include "formats/codecs.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

using formats::bf16_from_float;
using formats::bf16_to_float;

void check_routing_config(const RoutingConfig& c) {
  using core::require;
  const std::string e = std::to_string(c.num_experts);
  require(c.num_tokens >= 0, "num_tokens", "must be >= 0");
  core::require_in_range(c.num_tokens, 0, ::cakemoe::stepfun::kMaxNumTokens, "num_tokens",
                         "num_tokens");
  require(c.num_experts >= 1 && c.num_experts <= 65535, "num_experts",
          "must lie in [1, 65535] (16-bit packed ids), got " + e);
  require(c.top_k >= 1 && c.top_k <= c.num_experts, "top_k",
          "must lie in [1, num_experts = " + e + "], got " + std::to_string(c.top_k));
  require(c.local_num_experts >= 1, "local_num_experts", "must be > 0");
  require(c.local_expert_offset >= 0, "local_expert_offset", "must be >= 0");
  // NOTE: written as a difference: the sum of two caller values may overflow.
  require(c.local_expert_offset <= c.num_experts &&
              c.local_num_experts <= c.num_experts - c.local_expert_offset,
          "local_num_experts",
          "local_expert_offset + local_num_experts must be <= num_experts = " + e);
  require(c.tile >= 1, "tile_tokens_dim", "must be > 0");
}

void check_distinct_topk_ids(const int32_t* ids, int64_t num_tokens, int64_t top_k,
                             int64_t num_experts) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t* row = ids + t * top_k;
    for (int64_t i = 1; i < top_k; ++i) {
      if (row[i] < 0 || row[i] >= num_experts) continue;  // routed nowhere
      for (int64_t j = 0; j < i; ++j) {
        core::require(row[i] != row[j], "topk_ids",
                      "token " + std::to_string(t) + " selects expert " + std::to_string(row[i]) +
                          " twice (routes " + std::to_string(j) + " and " + std::to_string(i) +
                          "); spec §2.2 needs K distinct ids per token");
      }
    }
  }
}

uint32_t logit_key_fp32(float value) {
  const uint32_t bits = formats::float_to_bits(value);
  // Negative values: flip all bits (larger magnitude = smaller key); others: set the sign bit.
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

uint32_t logit_key_bf16(uint16_t bits) { return logit_key_fp32(bf16_to_float(bits)); }

void select_topk(const uint32_t* keys, int64_t num_experts, int64_t top_k, int32_t* ids) {
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t j = 0; j < num_experts; ++j) order[j] = static_cast<int32_t>(j);
  // A strict total order (key descending, then index ascending): the result is unique.
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                    [keys](int32_t a, int32_t b) {
                      return keys[a] != keys[b] ? keys[a] > keys[b] : a < b;
                    });
  std::copy(order.begin(), order.begin() + top_k, ids);
}

void softmax_weights(const float* selected, int64_t top_k, double routed_scaling_factor,
                     float* weights) {
  // NOTE: selected[] is descending in the §2.2 key order, so selected[0] is m = max_k s_k.
  const float m = selected[0];
  float sum = 0.0f;
  for (int64_t k = 0; k < top_k; ++k) {
    // NOTE: e_k is the correctly rounded fp32 exp of the fp32 difference, evaluated through
    // double so that neither side depends on an expf's last ulp (docs/decisions/routing.md).
    const float x = selected[k] - m;
    weights[k] = static_cast<float>(std::exp(static_cast<double>(x)));
    sum = sum + weights[k];  // sequential k order, one fp32 rounding per add
  }
  const bool scaled = routed_scaling_factor != 1.0;
  const float scale = static_cast<float>(routed_scaling_factor);
  for (int64_t k = 0; k < top_k; ++k) {
    weights[k] = weights[k] / sum;
    if (scaled) weights[k] = weights[k] * scale;  // cakemoe deviation 4, after the division
  }
}

int32_t pack_topk(int32_t expert_id, uint16_t weight_bf16) {
  return static_cast<int32_t>((static_cast<uint32_t>(expert_id) << 16) | weight_bf16);
}

void route_from_logits(const RoutingConfig& config, const void* logits, DType logits_dtype,
                       int32_t* topk_ids, uint16_t* topk_weights_bf16, int32_t* topk_packed) {
  check_routing_config(config);
  core::require(logits_dtype == DType::kBF16 || logits_dtype == DType::kFP32, "routing_logits",
                "dtype must be bf16 or fp32");
  const int64_t num_experts = config.num_experts;
  const int64_t top_k = config.top_k;
  core::parallel_for(config.num_tokens, [&](int64_t t) {
    std::vector<uint32_t> keys(static_cast<size_t>(num_experts));
    std::vector<float> values(static_cast<size_t>(num_experts));
    for (int64_t j = 0; j < num_experts; ++j) {
      const int64_t i = t * num_experts + j;
      if (logits_dtype == DType::kBF16) {
        const uint16_t bits = static_cast<const uint16_t*>(logits)[i];
        keys[j] = logit_key_bf16(bits);
        values[j] = bf16_to_float(bits);  // exact widening
      } else {
        const float v = static_cast<const float*>(logits)[i];
        keys[j] = logit_key_fp32(v);
        values[j] = v;
      }
    }
    std::vector<int32_t> ids(static_cast<size_t>(top_k));
    std::vector<float> selected(static_cast<size_t>(top_k)), weights(static_cast<size_t>(top_k));
    select_topk(keys.data(), num_experts, top_k, ids.data());
    for (int64_t k = 0; k < top_k; ++k) selected[k] = values[ids[k]];
    softmax_weights(selected.data(), top_k, config.routed_scaling_factor, weights.data());
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t o = t * top_k + k;
      const uint16_t w = bf16_from_float(weights[k]);  // RNE
      if (topk_ids) topk_ids[o] = ids[k];
      if (topk_weights_bf16) topk_weights_bf16[o] = w;
      if (topk_packed) topk_packed[o] = pack_topk(ids[k], w);
    }
  });
}

TopK route_from_logits(const RoutingConfig& config, const void* logits, DType logits_dtype) {
  check_routing_config(config);
  const size_t n = static_cast<size_t>(config.num_tokens * config.top_k);
  TopK out;
  out.ids.resize(n);
  out.weights.resize(n);
  out.packed.resize(n);
  route_from_logits(config, logits, logits_dtype, out.ids.data(), out.weights.data(),
                    out.packed.data());
  return out;
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
