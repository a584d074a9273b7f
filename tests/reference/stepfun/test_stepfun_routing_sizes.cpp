// Tests of the static routing bounds (spec stepfun §2.5) and the family / layout names.
#include <gtest/gtest.h>

#include <string>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {
namespace {

TEST(StepfunSizes, HandComputedBounds) {
  // min(E, T*K) + max(0, T*K - E) / tile, worked by hand.
  EXPECT_EQ(max_ctas(4, 2, 8, 8), 8);           // 8 pairs, 8 experts: 8 + 0
  EXPECT_EQ(max_padded(4, 2, 8, 8), 64);
  EXPECT_EQ(max_ctas(64, 8, 64, 8), 120);       // 512 pairs: 64 + 448/8
  EXPECT_EQ(max_padded(64, 8, 64, 8), 960);
  EXPECT_EQ(max_ctas(1, 8, 288, 16), 8);        // fewer pairs than experts
  EXPECT_EQ(max_padded(1, 8, 288, 16), 128);
  EXPECT_EQ(max_ctas(2048, 8, 288, 64), 539);   // 288 + 16096/64 = 288 + 251
  EXPECT_EQ(max_padded(2048, 8, 288, 64), 34496);
  EXPECT_EQ(max_ctas(3, 1, 2, 8), 2);           // 2 + 1/8
  EXPECT_EQ(max_ctas(8192, 8, 512, 256), 766);  // 512 + 65024/256 = 512 + 254
  EXPECT_EQ(max_padded(8192, 8, 512, 256), 196096);
  EXPECT_EQ(max_ctas(0, 8, 64, 8), 0);
  EXPECT_EQ(max_padded(0, 8, 64, 8), 0);
}

TEST(StepfunSizes, MonotonicInExperts) {
  // spec §2.5 DECISION relies on it: sizing with the global E is never too small.
  for (int64_t T : {1, 7, 64, 513}) {
    for (int64_t tile : {8, 16, 32, 64, 128, 256}) {
      for (int64_t E = 1; E < 600; E += 7) {
        EXPECT_LE(max_ctas(T, 8, E, tile), max_ctas(T, 8, E + 1, tile));
      }
    }
  }
}

TEST(StepfunSizes, RejectsBadArguments) {
  auto arg_of = [](auto fn) -> std::string {
    try {
      fn();
    } catch (const InvalidArgument& e) {
      return e.argument();
    }
    return "no throw";
  };
  EXPECT_EQ(arg_of([] { max_ctas(4, 2, 8, 0); }), "tile_tokens_dim");
  EXPECT_EQ(arg_of([] { max_padded(4, 2, 0, 8); }), "num_experts");
  EXPECT_EQ(arg_of([] { max_ctas(-1, 2, 8, 8); }), "num_tokens");
  EXPECT_EQ(arg_of([] { max_ctas(4, -2, 8, 8); }), "top_k");
  EXPECT_EQ(arg_of([] { max_ctas(int64_t(1) << 40, 8, 8, 8); }), "num_tokens");
}

TEST(StepfunNames, FamiliesRoundTrip) {
  const Family all[] = {Family::kBF16, Family::kFP8, Family::kMXFP8, Family::kNVFP4,
                        Family::kNVFP4BF16Tok};
  const char* names[] = {"bf16", "fp8", "mxfp8", "nvfp4", "nvfp4_bf16tok"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_STREQ(family_name(all[i]), names[i]);
    EXPECT_EQ(parse_family(names[i]), all[i]);
  }
}

TEST(StepfunNames, UnknownFamilyNamesTheValidOnes) {
  for (const char* bad : {"fp4", "NVFP4", "", "nvfp4 "}) {
    try {
      parse_family(bad);
      ADD_FAILURE() << "no throw for '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "family");
      const std::string rule = e.rule();
      for (const char* valid : {"bf16", "fp8", "mxfp8", "nvfp4", "nvfp4_bf16tok"}) {
        EXPECT_NE(rule.find(valid), std::string::npos) << rule;
      }
    }
  }
}

TEST(StepfunNames, SfLayouts) {
  EXPECT_STREQ(sf_layout_name(SfLayout::kLinear), "linear");
  EXPECT_STREQ(sf_layout_name(SfLayout::kR8C4), "r8c4");
  EXPECT_STREQ(sf_layout_name(SfLayout::kR128C4), "r128c4");
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
