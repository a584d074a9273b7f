// fp64 oracle of spec bgmv §2: exact dequantization, double math, optional RN shrink rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "reference/bgmv/bgmv.h"

namespace cakemoe {
namespace reference {
namespace bgmv {
namespace {

// Round-to-odd double -> float: keeps enough information that a following RNE to a format with
// at most 22 fraction bits gives the correctly rounded result (no double-rounding error).
float round_to_odd_float(double value) {
  float f = static_cast<float>(value);
  if (static_cast<double>(f) == value || std::isnan(value)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(value)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof(bits));
  return f;
}

double shrink_value(const Problem& p, int64_t s, int64_t pair, int64_t r, bool round_shrink) {
  const int64_t t = p.sorted_token_ids[pair];
  if (t < 0 || t >= p.num_tokens) return 0.0;
  const int64_t l = p.lora_indices[t];
  if (l < 0) return 0.0;
  const uint16_t* x = p.x + t * p.hidden;
  const uint16_t* a =
      p.lora_a[s] + ((l * p.num_experts + p.expert_ids[pair]) * p.rank + r) * p.hidden;
  double acc = 0.0;
  for (int64_t k = 0; k < p.hidden; ++k) {
    acc += static_cast<double>(widen(p.dtype, x[k])) * static_cast<double>(widen(p.dtype, a[k]));
  }
  return round_shrink ? round_to_dtype(p.dtype, acc) : acc;
}

}  // namespace

double round_to_dtype(DType dtype, double value) {
  return static_cast<double>(widen(dtype, narrow(dtype, round_to_odd_float(value))));
}

std::vector<double> oracle_shrink(const Problem& p, bool round_shrink) {
  const int64_t slices = p.num_slices();
  std::vector<double> out(slices * p.num_pairs * p.rank);
  core::parallel_for(slices * p.num_pairs, [&](int64_t index) {
    const int64_t s = index / p.num_pairs, pair = index % p.num_pairs;
    for (int64_t r = 0; r < p.rank; ++r) {
      out[index * p.rank + r] = shrink_value(p, s, pair, r, round_shrink);
    }
  });
  return out;
}

std::vector<double> oracle_y_row(const Problem& p, int64_t token, bool round_shrink) {
  const int64_t slices = p.num_slices(), f = p.feat_out;
  std::vector<double> row(slices * f, 0.0);
  const int64_t l = p.lora_indices[token];
  if (l < 0) return row;
  std::vector<double> s_row(p.rank);
  for (int64_t pair = 0; pair < p.num_pairs; ++pair) {
    if (p.sorted_token_ids[pair] != token) continue;
    const double w = p.topk_weights[pair];
    for (int64_t s = 0; s < slices; ++s) {
      for (int64_t r = 0; r < p.rank; ++r) s_row[r] = shrink_value(p, s, pair, r, round_shrink);
      const uint16_t* b = p.lora_b[s] + (l * p.num_experts + p.expert_ids[pair]) * f * p.rank;
      for (int64_t c = 0; c < f; ++c) {
        double dot = 0.0;
        for (int64_t r = 0; r < p.rank; ++r) {
          dot += s_row[r] * static_cast<double>(widen(p.dtype, b[c * p.rank + r]));
        }
        row[s * f + c] += w * dot;
      }
    }
  }
  return row;
}

std::vector<double> oracle_y(const Problem& p, bool round_shrink) {
  const int64_t width = p.num_slices() * p.feat_out;
  std::vector<double> y(p.num_tokens * width);
  core::parallel_for(p.num_tokens, [&](int64_t t) {
    const std::vector<double> row = oracle_y_row(p, t, round_shrink);
    std::copy(row.begin(), row.end(), y.begin() + t * width);
  });
  return y;
}

}  // namespace bgmv
}  // namespace reference
}  // namespace cakemoe
