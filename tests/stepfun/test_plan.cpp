// Plan selection (spec §8): the native tile window on the dense ladder, default = smallest
// candidate.
#include <gtest/gtest.h>

#include <sstream>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {
namespace {

ProblemDesc problem(Family family, int64_t t, int64_t k, int64_t e_loc) {
  ProblemDesc p;
  p.family = family;
  p.num_tokens = t;
  p.top_k = k;
  p.local_num_experts = e_loc;
  p.hidden_size = 4096;
  p.intermediate_size = 1536;
  return p;
}

std::vector<int> tiles(const std::vector<Plan>& plans) {
  std::vector<int> out;
  for (const Plan& p : plans) out.push_back(p.tile);
  return out;
}

TEST(Plan, WindowAroundCenter) {
  // avg = T*K/E_loc = 512*8/64 = 64 -> center 64: window {32, 64, 128, 256}.
  EXPECT_EQ(tiles(plans_for(problem(Family::kNVFP4, 512, 8, 64))),
            (std::vector<int>{32, 64, 128, 256}));
  EXPECT_EQ(default_plan(problem(Family::kNVFP4, 512, 8, 64)).tile, 32);
  // avg = 8*8/64 = 1 -> center clamps to 8: window {8, 16, 32}.
  EXPECT_EQ(tiles(plans_for(problem(Family::kBF16, 8, 8, 64))), (std::vector<int>{8, 16, 32}));
  EXPECT_EQ(default_plan(problem(Family::kBF16, 8, 8, 64)).tile, 8);
  // avg = ceil(2048*8/64) = 256 -> center 256 (top of ladder): window {128, 256}.
  EXPECT_EQ(tiles(plans_for(problem(Family::kFP8, 2048, 8, 64))), (std::vector<int>{128, 256}));
  // avg = ceil(64*8/64) = 8 -> center 8: {8, 16, 32}; ceil(65*8/64) = 9 -> center 16.
  EXPECT_EQ(default_plan(problem(Family::kMXFP8, 64, 8, 64)).tile, 8);
  EXPECT_EQ(tiles(plans_for(problem(Family::kMXFP8, 65, 8, 64))),
            (std::vector<int>{8, 16, 32, 64}));
}

TEST(Plan, DerivedFields) {
  for (const Plan& p : plans_for(problem(Family::kNVFP4BF16Tok, 2048, 8, 64))) {
    EXPECT_EQ(p.family, Family::kNVFP4BF16Tok);
    EXPECT_EQ(p.path, "cpu");
    EXPECT_EQ(p.act_sf_layout, p.tile <= 64 ? SfLayout::kR8C4 : SfLayout::kR128C4);
    EXPECT_FALSE(p.fc1_kernel.empty());
    EXPECT_FALSE(p.fc2_kernel.empty());
    std::ostringstream os;
    os << p;
    EXPECT_NE(os.str().find("nvfp4_bf16tok"), std::string::npos);
  }
}

TEST(Plan, RejectsBadProblems) {
  EXPECT_THROW(plans_for(problem(Family::kBF16, 0, 8, 64)), InvalidArgument);
  EXPECT_THROW(plans_for(problem(Family::kBF16, 8, 0, 64)), InvalidArgument);
  ProblemDesc p = problem(Family::kBF16, 8, 8, 64);
  p.intermediate_size = 100;
  try {
    plans_for(p);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "intermediate_size");
  }
}

TEST(Sizes, MatchSpecFormula) {
  // max_ctas = min(E, T*K) + max(0, T*K - E) / tile
  EXPECT_EQ(max_ctas(8, 8, 64, 8), 64);  // T*K = 64 = E
  EXPECT_EQ(max_ctas(512, 8, 64, 32), 64 + 4032 / 32);
  EXPECT_EQ(max_padded(1, 8, 288, 8), 8 * 8);
  EXPECT_EQ(max_padded(512, 8, 64, 32), (64 + 4032 / 32) * 32);
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
