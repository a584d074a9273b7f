// BGMV reference engine vs the fp64 oracle (spec bgmv §2, §3.4, §11.1).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "reference/bgmv/bgmv.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace {

namespace ref = reference::bgmv;
using bgmv_test::Case;
using bgmv_test::CaseSpec;
using bgmv_test::make_case;
using bgmv_test::PairOrder;

constexpr double kTol = 1e-2;  // spec §11: atol = rtol = 1e-2

struct Output {
  std::vector<uint16_t> shrink;
  std::vector<float> y;
};

// Runs the engine on poisoned outputs.
Output run_engine(const Case& c, int splits, bool grouped = false) {
  const ref::Problem p = c.problem();
  Output out;
  out.shrink.assign(p.num_slices() * p.num_pairs * p.rank, 0xFFFF);
  out.y.assign(p.num_tokens * p.num_slices() * p.feat_out, std::nanf(""));
  ref::CanonicalParams params;
  params.shrink_splits = splits;
  params.grouped = grouped;
  ref::run(p, params, out.shrink.data(), out.y.data(), p.num_slices() * p.feat_out);
  return out;
}

// y within tolerance of the unrounded-shrink oracle; active rows non-vacuous; other rows exact 0.
void expect_matches_oracle(const Case& c, const Output& out, const std::string& label) {
  const ref::Problem p = c.problem();
  const int64_t width = p.num_slices() * p.feat_out;
  const std::vector<double> expected = ref::oracle_y(p, /*round_shrink=*/false);
  const std::vector<double> actual = bgmv_test::to_double(out.y.data(), p.num_tokens * width);
  const int64_t bad = testbed::first_mismatch(actual, expected, kTol, kTol);
  ASSERT_EQ(bad, -1) << label << ": y[" << bad / width << ", " << bad % width
                     << "] = " << (bad >= 0 ? actual[bad] : 0) << " vs oracle "
                     << (bad >= 0 ? expected[bad] : 0);
  int active = 0;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const float* row = out.y.data() + t * width;
    if (c.active(t)) {
      ++active;
      EXPECT_GT(bgmv_test::max_abs(row, width), 0.1) << label << ": vacuous row " << t;
    } else {
      for (int64_t i = 0; i < width; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &row[i], sizeof(bits));
        ASSERT_EQ(bits, 0u) << label << ": inactive token " << t << " column " << i;
      }
    }
  }
  if (p.num_tokens > 1) {
    EXPECT_GT(active, 0) << label;
  }
}

TEST(BgmvReference, PortableMatrixMatchesOracle) {
  uint64_t seed = 100;
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    for (int64_t t : {1, 4, 32}) {
      for (int64_t h : {768, 2048}) {
        for (int64_t r : {16, 32}) {
          for (int64_t e : {8, 64}) {
            CaseSpec spec;
            spec.dtype = dtype;
            spec.tokens = t;
            spec.hidden = h;
            spec.rank = r;
            spec.experts = e;
            spec.loras = 4;
            spec.seed = ++seed;
            const Case c = make_case(spec);
            const std::string label = std::string(dtype_name(dtype)) + " T=" + std::to_string(t) +
                                      " H=" + std::to_string(h) + " R=" + std::to_string(r) +
                                      " E=" + std::to_string(e);
            expect_matches_oracle(c, run_engine(c, 1), label + " splits=1");
            expect_matches_oracle(c, run_engine(c, 2), label + " splits=2");
          }
        }
      }
    }
  }
}

TEST(BgmvReference, ShrinkRowsAreRoundedOracleRows) {
  CaseSpec spec;
  spec.tokens = 8;
  spec.hidden = 2048;
  spec.rank = 32;
  spec.seed = 7;
  const Case c = make_case(spec);
  const Output out = run_engine(c, 1);
  const std::vector<double> rounded = ref::oracle_shrink(c.problem(), /*round_shrink=*/true);
  int64_t differ_by_more_than_one_ulp = 0;
  for (size_t i = 0; i < rounded.size(); ++i) {
    const double got = ref::widen(spec.dtype, out.shrink[i]);
    // fp32 accumulation may flip a rounding tie-break: allow one bf16 ulp, never more.
    const double ulp = std::fabs(rounded[i]) * std::ldexp(1.0, -7) + 1e-30;
    if (std::fabs(got - rounded[i]) > ulp) ++differ_by_more_than_one_ulp;
  }
  EXPECT_EQ(differ_by_more_than_one_ulp, 0);
}

TEST(BgmvReference, PaddingPairsAreSkipped) {
  CaseSpec spec;
  spec.tokens = 6;
  spec.seed = 11;
  Case base = make_case(spec);
  Case padded = base;
  // Non-zero weights and valid experts: the pairs must be skipped for their token id alone.
  padded.add_pair(-1, 3, 1.0f);
  padded.add_pair(spec.tokens, 1, 1.0f);
  padded.add_pair(1 << 20, 0, 0.5f);
  const Output a = run_engine(base, 1);
  const Output b = run_engine(padded, 1);
  EXPECT_EQ(0, std::memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(float)));
  for (int64_t pair = base.num_pairs(); pair < padded.num_pairs(); ++pair) {
    for (int64_t r = 0; r < spec.rank; ++r) EXPECT_EQ(b.shrink[pair * spec.rank + r], 0);
  }
  expect_matches_oracle(padded, b, "padded");
}

TEST(BgmvReference, AllTokensWithoutLoraGiveExactZeros) {
  CaseSpec spec;
  spec.tokens = 5;
  spec.seed = 12;
  Case c = make_case(spec);
  std::fill(c.lora_indices.begin(), c.lora_indices.end(), -1);
  const Output out = run_engine(c, 1);
  for (float v : out.y) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    ASSERT_EQ(bits, 0u);
  }
  for (uint16_t s : out.shrink) ASSERT_EQ(s, 0);
}

TEST(BgmvReference, ExtraRouteTakesPart) {
  CaseSpec spec;
  spec.tokens = 6;
  spec.seed = 13;
  spec.nan_unused_blocks = false;
  Case base = make_case(spec);
  base.lora_indices[0] = 1;  // token 0 active so its extra route matters
  Case extra = base;
  extra.add_pair(0, 0, 0.25f);
  const Output a = run_engine(base, 1);
  const Output b = run_engine(extra, 1);
  expect_matches_oracle(extra, b, "extra route");
  const int64_t width = spec.hidden;
  EXPECT_NE(0, std::memcmp(a.y.data(), b.y.data(), width * sizeof(float)));
  // Other tokens are untouched, bit for bit.
  EXPECT_EQ(0, std::memcmp(a.y.data() + width, b.y.data() + width,
                           (spec.tokens - 1) * width * sizeof(float)));
}

TEST(BgmvReference, PairOrdersGiveIdenticalBits) {
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    CaseSpec spec;
    spec.dtype = dtype;
    spec.tokens = 24;
    spec.top_k = 4;
    spec.experts = 16;
    spec.rank = 32;
    spec.seed = 14;
    const Case token_major = make_case(spec);
    spec.order = PairOrder::kSlotMajor;
    const Case slot_major = make_case(spec);
    spec.order = PairOrder::kExpertSorted;
    const Case expert_sorted = make_case(spec);
    const Output a = run_engine(token_major, 1);
    expect_matches_oracle(token_major, a, "token-major");
    for (const Case* other : {&slot_major, &expert_sorted}) {
      const Output b = run_engine(*other, 1);
      ASSERT_EQ(0, std::memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(float)));
      // Shrink rows follow their pairs.
      for (int64_t p = 0; p < other->num_pairs(); ++p) {
        const int64_t t = other->sorted_token_ids[p];
        int64_t q = 0;
        while (token_major.sorted_token_ids[q] != t ||
               token_major.expert_ids[q] != other->expert_ids[p]) {
          ++q;
        }
        EXPECT_EQ(0, std::memcmp(&a.shrink[q * spec.rank], &b.shrink[p * spec.rank],
                                 spec.rank * sizeof(uint16_t)));
      }
    }
  }
}

TEST(BgmvReference, TopK20) {
  CaseSpec spec;
  spec.tokens = 8;
  spec.hidden = 2048;
  spec.rank = 8;
  spec.experts = 64;
  spec.top_k = 20;
  spec.order = PairOrder::kExpertSorted;
  spec.seed = 15;
  const Case c = make_case(spec);
  expect_matches_oracle(c, run_engine(c, 2), "k=20");
}

TEST(BgmvReference, TwoSlices) {
  CaseSpec spec;
  spec.tokens = 8;
  spec.hidden = 2048;
  spec.rank = 16;
  spec.slices = 2;
  spec.seed = 16;
  const Case c = make_case(spec);
  const Output out = run_engine(c, 1);
  expect_matches_oracle(c, out, "two slices");
  // The slices have different weights, so their column blocks differ.
  EXPECT_NE(0, std::memcmp(out.y.data() + spec.hidden, out.y.data() + 2 * spec.hidden,
                           spec.hidden * sizeof(float)));
}

TEST(BgmvReference, SingleTokenSingleExpertRank8) {
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    CaseSpec spec;
    spec.dtype = dtype;
    spec.tokens = 1;
    spec.experts = 1;
    spec.rank = 8;
    spec.top_k = 1;
    spec.seed = 17;
    const Case c = make_case(spec);
    expect_matches_oracle(c, run_engine(c, 1), "T=1 E=1 R=8 k=1");
  }
}

TEST(BgmvReference, OddShapesOfThePortablePath) {
  // Rank 12 (ragged last expand group), hidden 2052 (not a multiple of 8), feat_out != hidden.
  CaseSpec spec;
  spec.tokens = 9;
  spec.hidden = 2052;
  spec.rank = 12;
  spec.feat_out = 520;
  spec.top_k = 3;
  spec.seed = 18;
  const Case c = make_case(spec);
  expect_matches_oracle(c, run_engine(c, 1), "odd shapes splits=1");
  expect_matches_oracle(c, run_engine(c, 3), "odd shapes splits=3");
}

TEST(BgmvReference, ReplaysAreBitwiseIdentical) {
  CaseSpec spec;
  spec.tokens = 16;
  spec.hidden = 2048;
  spec.top_k = 4;
  spec.experts = 8;
  spec.order = PairOrder::kExpertSorted;
  spec.seed = 19;
  const Case c = make_case(spec);
  const Output first = run_engine(c, 2, /*grouped=*/false);
  for (int i = 0; i < 3; ++i) {
    const Output again = run_engine(c, 2, /*grouped=*/false);
    ASSERT_EQ(0, std::memcmp(first.y.data(), again.y.data(), first.y.size() * sizeof(float)));
    ASSERT_EQ(first.shrink, again.shrink);
  }
}

}  // namespace
}  // namespace cakemoe
