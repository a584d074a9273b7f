// Tests of the finalize reference (spec stepfun §7.2): hand cases where a non-fused or reordered
// sum would differ, -1 skipping, bf16 / fp32 weights, and a double-precision bound on random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "cakemoe/errors.h"
#include "reference/stepfun/finalize.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

constexpr uint16_t kNaNBf16 = 0x7FC0;
constexpr uint16_t kPoison = 0xFFFF;

float float_of_bf16(uint16_t h) {
  const uint32_t b = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

uint16_t truncate_to_bf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return static_cast<uint16_t>(b >> 16);
}

FinalizeShape shape_of(int64_t T, int64_t K, int64_t H, int64_t rows) {
  FinalizeShape s;
  s.num_tokens = T;
  s.top_k = K;
  s.hidden = H;
  s.gemm2_rows = rows;
  return s;
}

TEST(StepfunFinalize, FusedMultiplyAddAndKOrderAreObservable) {
  // Rows: 0 = -(1 + 2^-7), 1 = 1 + 2^-7, 2 = 256, 3 = 2^-20, 4 = -256, 5 = 1, 6.. = NaN (unread).
  std::vector<uint16_t> g2 = {0xBF81, 0x3F81, 0x4380, 0x3580, 0xC380, 0x3F80, kNaNBf16, kNaNBf16};
  // Token 0 (fp32 weights): 1 * row0 + (1 + 2^-23) * row1. With one rounding per fma the sum is
  // 2^-23 * (1 + 2^-7) exactly (bf16 0x3401); a rounded product, or k reversed, gives 2^-23
  // (0x3400). Token 1: 256 + 2^-20 - 256 in fp32 is 0 in k order (2^-20 if reordered or summed in
  // double). Token 2: only k = 1 is live: 0.5 * 1 = 0.5 (0x3F00).
  const std::vector<float> w32 = {1.0f, 1.0f + 0x1p-23f, 0.0f,
                                  1.0f, 1.0f, 1.0f,
                                  100.0f, 0.5f, 100.0f};
  const std::vector<int32_t> e2p = {0, 1, -1, 2, 3, 4, -1, 5, -1};
  std::vector<uint16_t> out(3, kPoison);
  finalize(shape_of(3, 3, 1, 8), g2.data(), w32.data(), DType::kFP32, e2p.data(), out.data());
  EXPECT_EQ(out, (std::vector<uint16_t>{0x3401, 0x0000, 0x3F00}));

  // The same k order reversed for token 0 gives the other answer.
  const std::vector<float> w32_rev = {1.0f + 0x1p-23f, 1.0f};
  const std::vector<int32_t> e2p_rev = {1, 0};
  std::vector<uint16_t> out_rev(1, kPoison);
  finalize(shape_of(1, 2, 1, 8), g2.data(), w32_rev.data(), DType::kFP32, e2p_rev.data(),
           out_rev.data());
  EXPECT_EQ(out_rev[0], 0x3400);
}

TEST(StepfunFinalize, Bf16WeightsAccumulateInFp32) {
  // Token 0: 1*1 + 2^-8*1 = 1 + 2^-8, a bf16 tie rounded to even (1.0, 0x3F80); k = 2 skipped.
  // Token 1: 1 + 2^-8 + 2^-8 = 1 + 2^-7 in the fp32 accumulator (0x3F81); rounding to bf16
  // after every step would stay at 1.0.
  const std::vector<uint16_t> g2 = {0x3F80};
  const std::vector<uint16_t> w = {0x3F80, 0x3B80, 0x3F80, 0x3F80, 0x3B80, 0x3B80};
  const std::vector<int32_t> e2p = {0, 0, -1, 0, 0, 0};
  std::vector<uint16_t> out(2, kPoison);
  finalize(shape_of(2, 3, 1, 1), g2.data(), w.data(), DType::kBF16, e2p.data(), out.data());
  EXPECT_EQ(out, (std::vector<uint16_t>{0x3F80, 0x3F81}));
}

TEST(StepfunFinalize, AllSkippedTokenIsZero) {
  const std::vector<uint16_t> g2 = {kNaNBf16, kNaNBf16};
  const std::vector<float> w = {2.0f, 3.0f};
  const std::vector<int32_t> e2p = {-1, -1};
  std::vector<uint16_t> out(2, kPoison);
  finalize(shape_of(1, 2, 2, 1), g2.data(), w.data(), DType::kFP32, e2p.data(), out.data());
  EXPECT_EQ(out, (std::vector<uint16_t>{0, 0}));
}

struct RandomCase {
  int64_t T = 37, K = 8, H = 72, rows = 0;
  std::vector<uint16_t> g2;        // [rows, H], unreferenced rows NaN
  std::vector<int32_t> e2p;        // [T*K] with -1 holes
  std::vector<uint16_t> w_bf16;    // [T*K]
  std::vector<float> w_fp32;       // [T*K], not bf16-representable
};

RandomCase make_random_case(uint64_t seed) {
  testbed::Rng rng(seed);
  RandomCase c;
  c.rows = c.T * c.K + 40;
  c.g2.assign(static_cast<size_t>(c.rows * c.H), kNaNBf16);
  std::vector<int32_t> slots(static_cast<size_t>(c.rows));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng.engine());
  for (int64_t i = 0; i < c.T * c.K; ++i) {
    const bool live = rng.integer(0, 5) != 0;
    c.e2p.push_back(live ? slots[i] : -1);
    if (live) {
      for (int64_t h = 0; h < c.H; ++h) {
        c.g2[slots[i] * c.H + h] = truncate_to_bf16(rng.normal() * 4.0f);
      }
    }
    c.w_bf16.push_back(truncate_to_bf16(rng.uniform(0.0f, 1.0f)));
    c.w_fp32.push_back(rng.uniform(-1.0f, 1.0f));
  }
  return c;
}

TEST(StepfunFinalize, RandomWithinDoubleBoundBothWeightDtypes) {
  const RandomCase c = make_random_case(8);
  for (bool fp32 : {false, true}) {
    std::vector<uint16_t> out(static_cast<size_t>(c.T * c.H), kPoison);
    const void* w = fp32 ? static_cast<const void*>(c.w_fp32.data()) : c.w_bf16.data();
    finalize(shape_of(c.T, c.K, c.H, c.rows), c.g2.data(), w, fp32 ? DType::kFP32 : DType::kBF16,
             c.e2p.data(), out.data());
    for (int64_t t = 0; t < c.T; ++t) {
      for (int64_t h = 0; h < c.H; ++h) {
        double exact = 0.0, magnitude = 0.0;
        for (int64_t k = 0; k < c.K; ++k) {
          const int32_t p = c.e2p[t * c.K + k];
          if (p < 0) continue;
          const double wk = fp32 ? c.w_fp32[t * c.K + k] : float_of_bf16(c.w_bf16[t * c.K + k]);
          const double term = wk * float_of_bf16(c.g2[p * c.H + h]);  // exact in double
          exact += term;
          magnitude += std::fabs(term);
        }
        const double acc_err = c.K * 0x1p-24 * magnitude;
        const double bound = 0x1p-8 * (std::fabs(exact) + acc_err) + acc_err;
        const double got = float_of_bf16(out[t * c.H + h]);
        ASSERT_LE(std::fabs(got - exact), bound) << "fp32=" << fp32 << " t=" << t << " h=" << h;
      }
    }
  }
}

TEST(StepfunFinalize, RowPermutationAndWeightDtypeInvariance) {
  const RandomCase c = make_random_case(21);
  const FinalizeShape shape = shape_of(c.T, c.K, c.H, c.rows);
  std::vector<uint16_t> base(static_cast<size_t>(c.T * c.H), kPoison);
  finalize(shape, c.g2.data(), c.w_bf16.data(), DType::kBF16, c.e2p.data(), base.data());

  // Moving the FC2 rows and rewriting e2p accordingly changes nothing.
  std::vector<int32_t> moved(static_cast<size_t>(c.rows));
  for (int64_t r = 0; r < c.rows; ++r) moved[r] = static_cast<int32_t>(c.rows - 1 - r);
  std::vector<uint16_t> g2_moved(c.g2.size());
  for (int64_t r = 0; r < c.rows; ++r) {
    std::copy(c.g2.begin() + r * c.H, c.g2.begin() + (r + 1) * c.H,
              g2_moved.begin() + moved[r] * c.H);
  }
  std::vector<int32_t> e2p_moved(c.e2p);
  for (auto& p : e2p_moved) p = p < 0 ? -1 : moved[p];
  std::vector<uint16_t> out(base.size(), kPoison);
  finalize(shape, g2_moved.data(), c.w_bf16.data(), DType::kBF16, e2p_moved.data(), out.data());
  EXPECT_EQ(out, base);

  // bf16 weights widened to fp32 give identical bits through the fp32 kernel path.
  std::vector<float> widened(c.w_bf16.size());
  for (size_t i = 0; i < widened.size(); ++i) widened[i] = float_of_bf16(c.w_bf16[i]);
  std::fill(out.begin(), out.end(), kPoison);
  finalize(shape, c.g2.data(), widened.data(), DType::kFP32, c.e2p.data(), out.data());
  EXPECT_EQ(out, base);
}

TEST(StepfunFinalize, RejectsBadSlotsAndDtypeBeforeWriting) {
  const std::vector<uint16_t> g2(4 * 2, 0x3F80);
  const std::vector<float> w(4, 1.0f);
  auto expect_throw = [&](std::vector<int32_t> e2p, DType dtype, const char* arg) {
    std::vector<uint16_t> out(4, kPoison);
    try {
      finalize(shape_of(2, 2, 2, 4), g2.data(), w.data(), dtype, e2p.data(), out.data());
      ADD_FAILURE() << "no throw for " << arg;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), arg);
    }
    EXPECT_EQ(out, std::vector<uint16_t>(4, kPoison));
  };
  expect_throw({0, 1, 2, 4}, DType::kFP32, "expanded_idx_to_permuted_idx");
  expect_throw({0, -2, 2, 3}, DType::kFP32, "expanded_idx_to_permuted_idx");
  expect_throw({0, 1, 2, 3}, DType::kFP16, "expert_weights");
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
