// Tests of the StepFun routing reference (spec stepfun §2.1-§2.2): top-k order and ties, softmax
// weights against a double-precision re-derivation, routed scaling, packed words.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cakemoe/errors.h"
#include "reference/stepfun/routing.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

// ---- Test-local number helpers (independent of the library codecs) -----------------------------

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

double bf16_value(uint16_t bits) { return float_of(uint32_t(bits) << 16); }

/// Truncation of a float's bits: the bf16 code just below |x| in magnitude.
uint16_t bf16_truncate(float x) { return static_cast<uint16_t>(bits_of(x) >> 16); }

/// The two bf16 neighbours of x (lo toward zero, hi away from zero); lo == hi if x is exact.
void bf16_neighbours(double x, uint16_t* lo, uint16_t* hi) {
  *lo = bf16_truncate(static_cast<float>(x));
  // static_cast<float> may round up past a bf16 boundary; step down until |lo| <= |x|.
  while (std::fabs(bf16_value(*lo)) > std::fabs(x)) --*lo;
  *hi = bf16_value(*lo) == x ? *lo : static_cast<uint16_t>(*lo + 1);
}

/// The bf16 codes acceptable for an exact value x: the nearest one, or both neighbours when x lies
/// within `slack` (relative) of their midpoint.
std::vector<uint16_t> acceptable_bf16(double x, double slack = 1e-5) {
  uint16_t lo, hi;
  bf16_neighbours(x, &lo, &hi);
  if (lo == hi) return {lo};
  const double dlo = std::fabs(x - bf16_value(lo));
  const double dhi = std::fabs(bf16_value(hi) - x);
  if (std::fabs(dlo - dhi) <= slack * std::fabs(x)) return {lo, hi};
  return {dlo < dhi ? lo : hi};
}

bool contains(const std::vector<uint16_t>& v, uint16_t x) {
  for (uint16_t y : v) if (y == x) return true;
  return false;
}

uint16_t to_bf16_bits_exact(float x) {  // for values already representable in bf16
  EXPECT_EQ(bits_of(x) & 0xFFFFu, 0u) << x << " is not a bf16 value";
  return bf16_truncate(x);
}

RoutingConfig make_config(int64_t T, int64_t K, int64_t E) {
  RoutingConfig c;
  c.num_tokens = T;
  c.top_k = K;
  c.num_experts = E;
  c.local_expert_offset = 0;
  c.local_num_experts = E;
  c.tile = 8;
  return c;
}

/// Random bf16-representable logits; `distinct` avoids exact ties.
std::vector<float> random_logits(testbed::Rng& rng, size_t n, float scale = 2.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = float_of(uint32_t(bf16_truncate(rng.normal() * scale)) << 16);
  return v;
}

std::vector<uint16_t> as_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_bf16_bits_exact(v[i]);
  return out;
}

/// Brute force: K passes of "largest value not yet chosen, smallest index on ties".
std::vector<int32_t> brute_topk(const float* row, int64_t E, int64_t K) {
  std::vector<bool> taken(static_cast<size_t>(E), false);
  std::vector<int32_t> ids;
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    for (int64_t j = 0; j < E; ++j) {
      if (taken[j]) continue;
      if (best < 0 || row[j] > row[best]) best = j;
    }
    taken[best] = true;
    ids.push_back(static_cast<int32_t>(best));
  }
  return ids;
}

/// Softmax of the selected values in double, times the scale.
std::vector<double> double_weights(const float* row, const std::vector<int32_t>& ids,
                                   double scale) {
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t j : ids) m = std::max(m, double(row[j]));
  double sum = 0.0;
  std::vector<double> w;
  for (int32_t j : ids) w.push_back(std::exp(double(row[j]) - m));
  for (double e : w) sum += e;
  for (double& e : w) e = e / sum * scale;
  return w;
}

/// Checks ids against brute force and weights against the double derivation (tie-aware).
void check_against_brute_force(const RoutingConfig& c, const std::vector<float>& logits,
                               const TopK& got) {
  for (int64_t t = 0; t < c.num_tokens; ++t) {
    const float* row = logits.data() + t * c.num_experts;
    const std::vector<int32_t> ids = brute_topk(row, c.num_experts, c.top_k);
    const std::vector<double> w = double_weights(row, ids, c.routed_scaling_factor);
    for (int64_t k = 0; k < c.top_k; ++k) {
      const int64_t o = t * c.top_k + k;
      ASSERT_EQ(got.ids[o], ids[k]) << "t=" << t << " k=" << k;
      const std::vector<uint16_t> ok = acceptable_bf16(w[k]);
      ASSERT_TRUE(contains(ok, got.weights[o]))
          << "t=" << t << " k=" << k << " got " << bf16_value(got.weights[o]) << " want " << w[k];
    }
  }
}

// ---- Selection ----------------------------------------------------------------------------------

TEST(StepfunRouting, EqualLogitsPickSmallerIndexFirst) {
  RoutingConfig c = make_config(2, 4, 16);
  std::vector<float> logits(32, 0.75f);
  // Token 1: ties among a subset above the rest.
  for (int j : {3, 9, 12, 5, 14}) logits[16 + j] = 1.5f;
  const TopK r = route_from_logits(c, as_bf16(logits).data(), DType::kBF16);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 2, 3, 3, 5, 9, 12}));
  // All four selected values equal -> each weight is exactly 1/4.
  for (int k = 0; k < 8; ++k) EXPECT_EQ(r.weights[k], 0x3E80) << k;  // bf16(0.25)
}

TEST(StepfunRouting, DescendingOrderMatchesBruteForceBf16AndFp32) {
  testbed::Rng rng(101);
  for (int64_t E : {8, 64, 288, 512}) {
    RoutingConfig c = make_config(9, std::min<int64_t>(8, E), E);
    // Coarse values make exact ties frequent (only 25 distinct logits).
    std::vector<float> logits(static_cast<size_t>(c.num_tokens * E));
    for (auto& x : logits) x = static_cast<float>(rng.integer(-12, 13)) * 0.25f;
    const TopK bf = route_from_logits(c, as_bf16(logits).data(), DType::kBF16);
    check_against_brute_force(c, logits, bf);
    const TopK fp = route_from_logits(c, logits.data(), DType::kFP32);
    // Same values in both dtypes: identical ids, weights and packed words.
    EXPECT_EQ(fp.ids, bf.ids) << "E=" << E;
    EXPECT_EQ(fp.weights, bf.weights) << "E=" << E;
    EXPECT_EQ(fp.packed, bf.packed) << "E=" << E;
  }
}

TEST(StepfunRouting, Fp32SeesDifferencesBelowBf16Resolution) {
  RoutingConfig c = make_config(1, 1, 4);
  const std::vector<float> logits = {1.0f, 1.0f + 0x1p-20f, 0.5f, 1.0f};
  EXPECT_EQ(route_from_logits(c, logits.data(), DType::kFP32).ids[0], 1);
  // The same bits truncated to bf16 are all 1.0: the tie goes to index 0.
  std::vector<uint16_t> bf = {0x3F80, bf16_truncate(logits[1]), 0x3F00, 0x3F80};
  EXPECT_EQ(route_from_logits(c, bf.data(), DType::kBF16).ids[0], 0);
}

TEST(StepfunRouting, SingleTokenAndAllExperts) {
  testbed::Rng rng(7);
  for (int64_t E : {1, 5, 64}) {
    RoutingConfig c = make_config(1, E, E);  // K = E: the whole row, sorted
    const std::vector<float> logits = random_logits(rng, static_cast<size_t>(E));
    const TopK r = route_from_logits(c, logits.data(), DType::kFP32);
    check_against_brute_force(c, logits, r);
    double sum = 0.0;
    for (uint16_t w : r.weights) sum += bf16_value(w);
    EXPECT_NEAR(sum, 1.0, 0.01 * E) << "E=" << E;
  }
  RoutingConfig one = make_config(1, 1, 1);
  const float single = -3.0f;
  const TopK r = route_from_logits(one, &single, DType::kFP32);
  EXPECT_EQ(r.ids[0], 0);
  EXPECT_EQ(r.weights[0], 0x3F80);  // bf16(1.0)
}

TEST(StepfunRouting, KeyOrderSignedZeroAndInfinities) {
  RoutingConfig c = make_config(1, 1, 2);
  const std::vector<float> zeros = {-0.0f, 0.0f};  // NOTE: total order on bits: -0 < +0
  EXPECT_EQ(route_from_logits(c, zeros.data(), DType::kFP32).ids[0], 1);

  RoutingConfig c3 = make_config(1, 3, 4);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {-inf, 1.0f, 2.0f, -inf};
  const TopK r = route_from_logits(c3, logits.data(), DType::kFP32);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ(r.weights[2], 0);  // exp(-inf) = +0 exactly
  // e = {1, e^-1}: weights 1/(1+e^-1) = 0.7310586, e^-1/(1+e^-1) = 0.2689414.
  EXPECT_TRUE(contains(acceptable_bf16(0.7310585786300049), r.weights[0]));
  EXPECT_TRUE(contains(acceptable_bf16(0.2689414213699951), r.weights[1]));
}

TEST(StepfunRouting, LargeIdsPackIntoTheHighHalf) {
  RoutingConfig c = make_config(1, 2, 40000);
  std::vector<float> logits(40000, -1.0f);
  logits[39999] = 2.0f;
  logits[32768] = 2.0f;  // tie: 32768 < 39999 comes first
  const TopK r = route_from_logits(c, logits.data(), DType::kFP32);
  ASSERT_EQ(r.ids, (std::vector<int32_t>{32768, 39999}));
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(static_cast<uint32_t>(r.packed[k]) >> 16, static_cast<uint32_t>(r.ids[k]));
    EXPECT_EQ(static_cast<uint32_t>(r.packed[k]) & 0xFFFFu, 0x3F00u);  // bf16(0.5)
  }
}

// ---- Weights ------------------------------------------------------------------------------------

TEST(StepfunRouting, SoftmaxWeightsMatchDoubleDerivation) {
  testbed::Rng rng(2024);
  for (int64_t E : {16, 288, 512}) {
    for (int64_t K : {1, 2, 8}) {
      RoutingConfig c = make_config(40, K, E);
      const std::vector<float> logits = random_logits(rng, static_cast<size_t>(40 * E), 3.0f);
      const TopK bf = route_from_logits(c, as_bf16(logits).data(), DType::kBF16);
      check_against_brute_force(c, logits, bf);
      // fp32 logits with bits below bf16 resolution (distinct from the bf16 case).
      std::vector<float> fine(logits.size());
      for (auto& x : fine) x = rng.normal() * 3.0f;
      check_against_brute_force(c, fine, route_from_logits(c, fine.data(), DType::kFP32));
    }
  }
}

TEST(StepfunRouting, PackedWordsCarryIdAndWeightBits) {
  testbed::Rng rng(5);
  RoutingConfig c = make_config(33, 8, 288);
  const std::vector<float> logits = random_logits(rng, 33 * 288);
  std::vector<int32_t> ids(33 * 8, 0x5A5A5A5A), packed(33 * 8, 0x5A5A5A5A);
  std::vector<uint16_t> weights(33 * 8, 0xFFFF);
  route_from_logits(c, logits.data(), DType::kFP32, ids.data(), weights.data(), packed.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(static_cast<uint32_t>(packed[i]),
              (static_cast<uint32_t>(ids[i]) << 16) | weights[i]) << i;
  }
  // Null outputs are skipped; the others are still written identically.
  std::vector<uint16_t> only_weights(33 * 8, 0xFFFF);
  route_from_logits(c, logits.data(), DType::kFP32, nullptr, only_weights.data(), nullptr);
  EXPECT_EQ(only_weights, weights);
}

TEST(StepfunRouting, RoutedScalingFactor) {
  testbed::Rng rng(77);
  RoutingConfig c = make_config(50, 8, 64);
  const std::vector<float> logits = random_logits(rng, 50 * 64);
  const TopK plain = route_from_logits(c, logits.data(), DType::kFP32);
  // A power of two commutes with both roundings: every weight doubles exactly.
  c.routed_scaling_factor = 2.0;
  const TopK doubled = route_from_logits(c, logits.data(), DType::kFP32);
  for (size_t i = 0; i < plain.weights.size(); ++i) {
    if (plain.weights[i] == 0) continue;
    EXPECT_EQ(bf16_value(doubled.weights[i]), 2.0 * bf16_value(plain.weights[i])) << i;
  }
  EXPECT_EQ(doubled.ids, plain.ids);
  // Step-3.5's factor 3.0 and an arbitrary one against the double derivation.
  for (double s : {3.0, 0.37}) {
    c.routed_scaling_factor = s;
    check_against_brute_force(c, logits, route_from_logits(c, logits.data(), DType::kFP32));
  }
}

// ---- Errors -------------------------------------------------------------------------------------

TEST(StepfunRouting, RejectsBadConfigBeforeWriting) {
  const std::vector<float> logits(64, 1.0f);
  std::vector<int32_t> ids(64, 0x5A5A5A5A);
  auto expect_throw = [&](RoutingConfig c, DType dtype, const char* arg) {
    try {
      route_from_logits(c, logits.data(), dtype, ids.data(), nullptr, nullptr);
      ADD_FAILURE() << "no throw for " << arg;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), arg);
    }
    for (int32_t v : ids) ASSERT_EQ(v, 0x5A5A5A5A);
  };
  RoutingConfig c = make_config(2, 9, 8);
  expect_throw(c, DType::kFP32, "top_k");
  c = make_config(2, 0, 8);
  expect_throw(c, DType::kFP32, "top_k");
  c = make_config(2, 2, 8);
  c.local_expert_offset = 4;
  c.local_num_experts = 5;
  expect_throw(c, DType::kFP32, "local_num_experts");
  c = make_config(2, 2, 8);
  c.tile = 0;
  expect_throw(c, DType::kFP32, "tile_tokens_dim");
  c = make_config(1, 2, 70000);
  expect_throw(c, DType::kFP32, "num_experts");
  expect_throw(make_config(2, 2, 8), DType::kFP16, "routing_logits");
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
