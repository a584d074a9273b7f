// Seeded BGMV test problems (spec bgmv §11): host operands, pair orders, views for the API.
// Header-only so that tests/bgmv and tests/reference can both use it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cakemoe/tensor.h"
#include "reference/bgmv/bgmv.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace bgmv_test {

enum class PairOrder { kTokenMajor, kSlotMajor, kExpertSorted };

struct CaseSpec {
  DType dtype = DType::kBF16;
  int64_t tokens = 4;
  int64_t hidden = 768;
  int64_t rank = 16;
  int64_t feat_out = 0;   ///< 0: equal to hidden
  int64_t slices = 1;
  int64_t loras = 2;
  int64_t experts = 8;
  int64_t top_k = 2;
  PairOrder order = PairOrder::kTokenMajor;
  uint64_t seed = 1;
  /// Fill the (lora, expert) weight blocks no route reads with NaN: faster to build, and a read
  /// of a wrong block shows up as NaN. Turn off before re-routing a case by hand.
  bool nan_unused_blocks = true;
};

/// Host operands of one problem. Data follow spec §11.2: x ~ N(0,1), A ~ N(0,1)*0.5/sqrt(H),
/// B ~ N(0,1)*2/sqrt(R) (shrink ~ 0.5, y ~ 1), softmax weights, token 0 without LoRA (T > 1),
/// a quarter of the second half of the tokens without LoRA. Each token's experts are distinct and
/// ascending in slot order, so every pair order keeps a token's routes in the same relative order.
struct Case {
  CaseSpec spec;
  std::vector<uint16_t> x;
  std::vector<std::vector<uint16_t>> lora_a, lora_b;
  std::vector<int64_t> sorted_token_ids, expert_ids, lora_indices;
  std::vector<float> topk_weights;

  int64_t feat_out() const { return spec.feat_out > 0 ? spec.feat_out : spec.hidden; }
  int64_t num_pairs() const { return static_cast<int64_t>(sorted_token_ids.size()); }

  /// Appends a pair (e.g. padding or an extra route).
  void add_pair(int64_t token, int64_t expert, float weight) {
    sorted_token_ids.push_back(token);
    expert_ids.push_back(expert);
    topk_weights.push_back(weight);
  }

  reference::bgmv::Problem problem() const {
    reference::bgmv::Problem p;
    p.dtype = spec.dtype;
    p.num_tokens = spec.tokens;
    p.hidden = spec.hidden;
    p.rank = spec.rank;
    p.feat_out = feat_out();
    p.num_pairs = num_pairs();
    p.num_loras = spec.loras;
    p.num_experts = spec.experts;
    p.x = x.data();
    for (const auto& a : lora_a) p.lora_a.push_back(a.data());
    for (const auto& b : lora_b) p.lora_b.push_back(b.data());
    p.sorted_token_ids = sorted_token_ids.data();
    p.expert_ids = expert_ids.data();
    p.lora_indices = lora_indices.data();
    p.topk_weights = topk_weights.data();
    return p;
  }

  // Views for prepare_bgmv_moe (non-owning: the case must outlive the plan).
  TensorView x_view() { return TensorView(x.data(), spec.dtype, {spec.tokens, spec.hidden}); }
  std::vector<TensorView> a_views() {
    std::vector<TensorView> v;
    for (auto& a : lora_a) {
      v.emplace_back(a.data(), spec.dtype,
                     std::vector<int64_t>{spec.loras, spec.experts, spec.rank, spec.hidden});
    }
    return v;
  }
  std::vector<TensorView> b_views() {
    std::vector<TensorView> v;
    for (auto& b : lora_b) {
      v.emplace_back(b.data(), spec.dtype,
                     std::vector<int64_t>{spec.loras, spec.experts, feat_out(), spec.rank});
    }
    return v;
  }
  TensorView sorted_view() {
    return TensorView(sorted_token_ids.data(), DType::kInt64, {num_pairs()});
  }
  TensorView experts_view() { return TensorView(expert_ids.data(), DType::kInt64, {num_pairs()}); }
  TensorView lora_view() {
    return TensorView(lora_indices.data(), DType::kInt64, {spec.tokens});
  }
  TensorView weights_view() {
    return TensorView(topk_weights.data(), DType::kFP32, {num_pairs()});
  }
  /// True when token t has a LoRA and at least one route.
  bool active(int64_t t) const {
    if (lora_indices[t] < 0) return false;
    return std::find(sorted_token_ids.begin(), sorted_token_ids.end(), t) !=
           sorted_token_ids.end();
  }
};

inline std::vector<uint16_t> random_half(testbed::Rng& rng, DType dtype, size_t n, float scale) {
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = reference::bgmv::narrow(dtype, rng.normal() * scale);
  return v;
}

inline Case make_case(const CaseSpec& spec) {
  if (spec.top_k > spec.experts) {  // distinct experts per token: a bad test row, not a skip
    throw std::invalid_argument("make_case: top_k " + std::to_string(spec.top_k) + " > experts " +
                                std::to_string(spec.experts));
  }
  testbed::Rng rng(spec.seed);
  Case c;
  c.spec = spec;
  const int64_t t_n = spec.tokens, h = spec.hidden, r = spec.rank, f = c.feat_out();
  c.x = random_half(rng, spec.dtype, t_n * h, 1.0f);
  c.lora_indices.resize(t_n);
  for (int64_t t = 0; t < t_n; ++t) {
    c.lora_indices[t] = rng.integer(0, spec.loras);
    if (t >= t_n / 2 && t_n > 1 && rng.uniform() < 0.25f) c.lora_indices[t] = -1;
  }
  if (t_n > 1) c.lora_indices[0] = -1;
  // Token-major routes: distinct experts per token, ascending by slot; softmax weights.
  std::vector<int64_t> tok(t_n * spec.top_k), exp(t_n * spec.top_k);
  std::vector<float> w(t_n * spec.top_k);
  std::vector<int64_t> all(spec.experts);
  for (int64_t t = 0; t < t_n; ++t) {
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng.engine());
    std::sort(all.begin(), all.begin() + spec.top_k);
    float total = 0.0f;
    for (int64_t j = 0; j < spec.top_k; ++j) {
      tok[t * spec.top_k + j] = t;
      exp[t * spec.top_k + j] = all[j];
      w[t * spec.top_k + j] = std::exp(rng.normal());
      total += w[t * spec.top_k + j];
    }
    for (int64_t j = 0; j < spec.top_k; ++j) w[t * spec.top_k + j] /= total;
  }
  std::vector<int64_t> perm(t_n * spec.top_k);
  std::iota(perm.begin(), perm.end(), 0);
  if (spec.order == PairOrder::kSlotMajor) {
    for (int64_t j = 0; j < spec.top_k; ++j) {
      for (int64_t t = 0; t < t_n; ++t) perm[j * t_n + t] = t * spec.top_k + j;
    }
  } else if (spec.order == PairOrder::kExpertSorted) {
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return exp[a] < exp[b]; });
  }
  for (int64_t i : perm) c.add_pair(tok[i], exp[i], w[i]);
  // Weights, block by (lora, expert) block.
  std::vector<bool> used(spec.loras * spec.experts, !spec.nan_unused_blocks);
  for (int64_t p = 0; p < c.num_pairs(); ++p) {
    const int64_t l = c.lora_indices[c.sorted_token_ids[p]];
    if (l >= 0) used[l * spec.experts + c.expert_ids[p]] = true;
  }
  const uint16_t nan_bits = reference::bgmv::narrow(spec.dtype, std::nanf(""));
  const float a_scale = 0.5f / std::sqrt(static_cast<float>(h));
  const float b_scale = 2.0f / std::sqrt(static_cast<float>(r));
  for (int64_t s = 0; s < spec.slices; ++s) {
    std::vector<uint16_t> a, b;
    for (size_t block = 0; block < used.size(); ++block) {
      const std::vector<uint16_t> ab = used[block] ? random_half(rng, spec.dtype, r * h, a_scale)
                                                   : std::vector<uint16_t>(r * h, nan_bits);
      const std::vector<uint16_t> bb = used[block] ? random_half(rng, spec.dtype, f * r, b_scale)
                                                   : std::vector<uint16_t>(f * r, nan_bits);
      a.insert(a.end(), ab.begin(), ab.end());
      b.insert(b.end(), bb.begin(), bb.end());
    }
    c.lora_a.push_back(std::move(a));
    c.lora_b.push_back(std::move(b));
  }
  return c;
}

/// Float vector -> double vector (for testbed comparisons).
inline std::vector<double> to_double(const float* data, int64_t n) {
  return std::vector<double>(data, data + n);
}

/// Max |v| over a range.
inline double max_abs(const float* v, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(v[i])));
  return m;
}

/// y (dense [T, S*F]) within atol = rtol = 1e-2 of the fp64 oracle (shrink not rounded, spec
/// §11.2), and every active token's row reaches max |y| > 0.1 (guards vacuous passes).
inline void expect_close_to_oracle(const Case& c, const std::vector<float>& y,
                                   const std::string& label) {
  const std::vector<double> want = reference::bgmv::oracle_y(c.problem(), false);
  const std::vector<double> got(y.begin(), y.end());
  const int64_t bad = testbed::first_mismatch(got, want, 1e-2, 1e-2);
  const int64_t width = c.feat_out() * c.spec.slices;
  EXPECT_EQ(bad, -1) << label << ": first oracle mismatch at row " << bad / width << " col "
                     << bad % width << ": got " << (bad >= 0 ? got[bad] : 0.0) << " want "
                     << (bad >= 0 ? want[bad] : 0.0)
                     << "; rel_frob=" << testbed::relative_frobenius(got, want);
  for (int64_t t = 0; t < c.spec.tokens; ++t) {
    if (c.active(t)) {
      EXPECT_GT(max_abs(y.data() + t * width, width), 0.1) << label << " token " << t;
    }
  }
}

}  // namespace bgmv_test
}  // namespace cakemoe
