// The canonical FP32 order of spec bgmv §3.2, checked against straight-line transcriptions that
// follow the spec text literally (masked K tail, per-lane butterflies), plus split and grouped
// bit effects and the engine's speed on the FlashInfer benchmark shape.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "cakemoe/errors.h"
#include "formats/codecs.h"
#include "reference/bgmv/bgmv.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace {

namespace ref = reference::bgmv;
using bgmv_test::Case;
using bgmv_test::CaseSpec;
using bgmv_test::make_case;
using formats::float_to_bits;

// spec §3.2 shrink, transcribed: thread tid owns K = tile*1024 + tid*8 + e (e < 8), skipped
// past H; lanes exchange v[i] + v[i ^ off]; warps summed in order from 0.0f; splits likewise.
float transcribed_shrink(const std::vector<float>& x, const std::vector<float>& a, int64_t h,
                         int splits) {
  const int64_t tiles = (h + 1023) / 1024;
  const int64_t per_split = (tiles + splits - 1) / splits;
  float total = 0.0f;
  for (int z = 0; z < splits; ++z) {
    float thread_acc[128];
    for (int tid = 0; tid < 128; ++tid) {
      float acc = 0.0f;
      for (int64_t tile = z * per_split; tile < std::min<int64_t>((z + 1) * per_split, tiles);
           ++tile) {
        for (int e = 0; e < 8; ++e) {
          const int64_t k = tile * 1024 + tid * 8 + e;
          if (k < h) acc = fmaf(x[k], a[k], acc);
        }
      }
      thread_acc[tid] = acc;
    }
    float block = 0.0f;
    for (int warp = 0; warp < 4; ++warp) {
      float v[32];
      for (int lane = 0; lane < 32; ++lane) v[lane] = thread_acc[warp * 32 + lane];
      for (int off = 16; off >= 1; off /= 2) {
        float next[32];
        for (int lane = 0; lane < 32; ++lane) next[lane] = v[lane] + v[lane ^ off];
        std::memcpy(v, next, sizeof(v));
      }
      block = block + v[0];
    }
    total = total + block;
  }
  return total;
}

// spec §3.2 expand for one y[t, c] (per-route) or the §5 grouped order (weight in the combine).
float transcribed_expand(const Case& c, const std::vector<uint16_t>& shrink, int64_t t,
                         int64_t col, bool grouped) {
  const int64_t r_total = c.spec.rank, groups = (r_total + 7) / 8;
  int lanes = 1;
  while (lanes < groups) lanes *= 2;
  const int64_t l = c.lora_indices[t];
  if (l < 0) return 0.0f;
  auto butterfly = [&](std::vector<float> v) {
    for (int off = lanes / 2; off >= 1; off /= 2) {
      std::vector<float> next(lanes);
      for (int i = 0; i < lanes; ++i) next[i] = v[i] + v[i ^ off];
      v = next;
    }
    return v[0];
  };
  std::vector<float> acc(lanes, 0.0f);
  float combined = 0.0f;
  for (int64_t p = 0; p < c.num_pairs(); ++p) {
    if (c.sorted_token_ids[p] != t) continue;
    const uint16_t* b = c.lora_b[0].data() +
                        ((l * c.spec.experts + c.expert_ids[p]) * c.feat_out() + col) * r_total;
    std::vector<float> parts(lanes, 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      float part = 0.0f;
      for (int64_t r = 8 * g; r < std::min<int64_t>(8 * g + 8, r_total); ++r) {
        part = fmaf(ref::widen(c.spec.dtype, shrink[p * r_total + r]),
                    ref::widen(c.spec.dtype, b[r]), part);
      }
      parts[g] = part;
      acc[g] = fmaf(part, c.topk_weights[p], acc[g]);
    }
    if (grouped) combined = fmaf(butterfly(parts), c.topk_weights[p], combined);
  }
  return grouped ? combined : butterfly(acc);
}

std::vector<float> widened(const std::vector<uint16_t>& v, DType dtype, int64_t offset,
                           int64_t n) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = ref::widen(dtype, v[offset + i]);
  return out;
}

TEST(BgmvCanonical, ShrinkMatchesTranscription) {
  // H = 2000: two tiles, the second with a masked tail; 8 rank rows; splits 1, 2 and 3.
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    CaseSpec spec;
    spec.dtype = dtype;
    spec.tokens = 3;
    spec.hidden = 2000;
    spec.rank = 8;
    spec.top_k = 1;
    spec.experts = 2;
    spec.seed = 31;
    spec.nan_unused_blocks = false;
    Case c = make_case(spec);
    c.lora_indices.assign(3, 1);
    const ref::Problem p = c.problem();
    for (int splits : {1, 2, 3}) {
      std::vector<uint16_t> shrink(p.num_pairs * p.rank, 0xFFFF);
      ref::CanonicalParams params;
      params.shrink_splits = splits;
      ref::shrink(p, params, shrink.data());
      for (int64_t pair = 0; pair < p.num_pairs; ++pair) {
        const int64_t t = c.sorted_token_ids[pair];
        const std::vector<float> x = widened(c.x, dtype, t * spec.hidden, spec.hidden);
        for (int64_t r = 0; r < spec.rank; ++r) {
          const int64_t row = ((1 * spec.experts + c.expert_ids[pair]) * spec.rank + r);
          const std::vector<float> a =
              widened(c.lora_a[0], dtype, row * spec.hidden, spec.hidden);
          const float expected = transcribed_shrink(x, a, spec.hidden, splits);
          ASSERT_EQ(float_to_bits(ref::shrink_dot(x.data(), a.data(), spec.hidden, splits)),
                    float_to_bits(expected));
          ASSERT_EQ(shrink[pair * spec.rank + r], ref::narrow(dtype, expected))
              << "pair " << pair << " rank " << r << " splits " << splits;
        }
      }
    }
  }
}

TEST(BgmvCanonical, ExpandMatchesTranscription) {
  // Rank 8 (one lane), 24 (three lanes padded to four), 32 and 64; per-route and grouped.
  for (int64_t rank : {8, 24, 32, 64}) {
    for (bool grouped : {false, true}) {
      CaseSpec spec;
      spec.tokens = 6;
      spec.hidden = 256;
      spec.rank = rank;
      spec.top_k = 3;
      spec.experts = 8;
      spec.order = bgmv_test::PairOrder::kExpertSorted;
      spec.seed = 40 + rank;
      const Case c = make_case(spec);
      const ref::Problem p = c.problem();
      std::vector<uint16_t> shrink(p.num_pairs * p.rank);
      std::vector<float> y(p.num_tokens * p.feat_out, std::nanf(""));
      ref::CanonicalParams params;
      params.grouped = grouped;
      ref::run(p, params, shrink.data(), y.data(), p.feat_out);
      for (int64_t t = 0; t < p.num_tokens; ++t) {
        for (int64_t col = 0; col < p.feat_out; ++col) {
          ASSERT_EQ(float_to_bits(y[t * p.feat_out + col]),
                    float_to_bits(transcribed_expand(c, shrink, t, col, grouped)))
              << "rank " << rank << " grouped " << grouped << " y[" << t << ", " << col << "]";
        }
      }
    }
  }
}

TEST(BgmvCanonical, ButterflyIsTheXorTree) {
  float lanes[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  // Offsets 2 then 1: lane 0 = (v0 + v2) + (v1 + v3) = 0 + 2.
  EXPECT_EQ(ref::butterfly_sum(lanes, 4), 2.0f);
  EXPECT_EQ(ref::expand_groups(8), 1);
  EXPECT_EQ(ref::expand_groups(12), 2);
  EXPECT_EQ(ref::expand_groups(64), 8);
  float three[3] = {1, 2, 3};
  EXPECT_THROW(ref::butterfly_sum(three, 3), InvalidArgument);
}

TEST(BgmvCanonical, SplitsChangeBitsOnAdversarialData) {
  // Thread 0 sees 2^24 in tile 0, then 1 and -2^24 in tile 1. One split: 2^24 + 1 rounds back to
  // 2^24 and the chain ends at 0. Two splits: tile 1 alone gives 1 - 2^24, and the split sum is 1.
  const int64_t h = 2048;
  std::vector<float> x(h, 0.0f), a(h, 0.0f);
  x[0] = 1.0f;
  a[0] = 16777216.0f;
  x[1024] = 1.0f;
  a[1024] = 1.0f;
  x[1025] = 1.0f;
  a[1025] = -16777216.0f;
  EXPECT_EQ(ref::shrink_dot(x.data(), a.data(), h, 1), 0.0f);
  EXPECT_EQ(ref::shrink_dot(x.data(), a.data(), h, 2), 1.0f);
  EXPECT_NE(ref::narrow(DType::kBF16, 0.0f), ref::narrow(DType::kBF16, 1.0f));
  // Both stay inside the fp32 dot-product error bound n * eps * sum |x a| around the exact 1.
  const double bound = 3 * std::ldexp(1.0, -24) * (2 * 16777216.0 + 1);
  EXPECT_LE(std::fabs(0.0 - 1.0), bound);

  // Random wide-range data: splits change fp32 bits on some rows, all within 1e-2 of the oracle.
  testbed::Rng rng(77);
  int changed = 0;
  for (int row = 0; row < 64; ++row) {
    std::vector<float> xr(4000), ar(4000);
    double exact = 0.0, magnitude = 0.0;
    for (int k = 0; k < 4000; ++k) {
      xr[k] = ref::widen(DType::kBF16, ref::narrow(DType::kBF16, rng.normal()));
      ar[k] = ref::widen(DType::kBF16,
                         ref::narrow(DType::kBF16, rng.normal() * std::ldexp(1.0f, k % 7)));
      exact += static_cast<double>(xr[k]) * ar[k];
      magnitude += std::fabs(static_cast<double>(xr[k]) * ar[k]);
    }
    const float one = ref::shrink_dot(xr.data(), ar.data(), 4000, 1);
    const float four = ref::shrink_dot(xr.data(), ar.data(), 4000, 4);
    if (float_to_bits(one) != float_to_bits(four)) ++changed;
    EXPECT_LE(std::fabs(one - exact), 1e-2 + 1e-2 * std::fabs(exact) + 1e-6 * magnitude);
    EXPECT_LE(std::fabs(four - exact), 1e-2 + 1e-2 * std::fabs(exact) + 1e-6 * magnitude);
  }
  EXPECT_GT(changed, 0);
}

TEST(BgmvCanonical, GroupedOrderStaysCloseToPerRoute) {
  CaseSpec spec;
  spec.tokens = 32;
  spec.hidden = 768;
  spec.rank = 32;
  spec.top_k = 4;
  spec.experts = 16;
  spec.seed = 51;
  const Case c = make_case(spec);
  const ref::Problem p = c.problem();
  std::vector<uint16_t> s1(p.num_pairs * p.rank), s2(p.num_pairs * p.rank);
  std::vector<float> y1(p.num_tokens * p.feat_out), y2(p.num_tokens * p.feat_out);
  ref::CanonicalParams grouped;
  grouped.grouped = true;
  ref::run(p, ref::CanonicalParams(), s1.data(), y1.data(), p.feat_out);
  ref::run(p, grouped, s2.data(), y2.data(), p.feat_out);
  EXPECT_EQ(s1, s2);  // the shrink does not depend on the expand order
  int differ = 0;
  for (size_t i = 0; i < y1.size(); ++i) {
    EXPECT_NEAR(y1[i], y2[i], 1e-5 + 1e-5 * std::fabs(y1[i]));
    if (float_to_bits(y1[i]) != float_to_bits(y2[i])) ++differ;
  }
  EXPECT_GT(differ, 0) << "the grouped order should be a different summation";
}

TEST(BgmvCanonical, BenchmarkShapeRunsInSeconds) {
  // FlashInfer's benchmark shape: T = 1024, H = 3072, R = 32, k = 2 (spec §12).
  CaseSpec spec;
  spec.tokens = 1024;
  spec.hidden = 3072;
  spec.rank = 32;
  spec.experts = 16;
  spec.top_k = 2;
  spec.seed = 61;
  const Case c = make_case(spec);
  const ref::Problem p = c.problem();
  std::vector<uint16_t> shrink(p.num_pairs * p.rank);
  std::vector<float> y(p.num_tokens * p.feat_out, std::nanf(""));
  const auto start = std::chrono::steady_clock::now();
  ref::run(p, ref::CanonicalParams(), shrink.data(), y.data(), p.feat_out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ bgmv ] reference T=1024 H=3072 R=32 k=2: %.2f s\n", seconds);
#ifndef CAKEMOE_SANITIZED  // instrumented code runs several times slower: no time bound there
  EXPECT_LT(seconds, 30.0);
#endif
  for (int64_t t : {1, 2, 511, 1023}) {
    const std::vector<double> expected = ref::oracle_y_row(p, t, false);
    const std::vector<double> actual = bgmv_test::to_double(y.data() + t * p.feat_out, p.feat_out);
    EXPECT_EQ(testbed::first_mismatch(actual, expected, 1e-2, 1e-2), -1) << "token " << t;
  }
}

}  // namespace
}  // namespace cakemoe
