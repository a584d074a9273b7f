// Reference FC2 (spec §7.1): bf16_rn(acc * s) against fp64 sums of independently decoded FC2
// inputs (every family, r8c4 and r128c4 scale layouts, I not a multiple of 128), untouched
// padded rows and table validation.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cakemoe/errors.h"
#include "reference/stepfun/stepfun_gemm_testing.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using testing::Case;
using testing::Dims;
using testing::kAllFamilies;
using testing::name;
using testing::PipelineOut;

/// FC2 input row in real units: the FC1 output, or for nvfp4_bf16tok the requant output.
std::vector<double> decode_fc2_input(const Case& c, const PipelineOut& out, int64_t row) {
  if (c.family != Family::kNVFP4BF16Tok) return testing::decode_fc1_row(c, out.fc1, row);
  const int64_t inter = c.dims.inter;
  std::vector<double> v(static_cast<size_t>(inter));
  for (int64_t i = 0; i < inter; ++i) {
    const uint8_t b = out.fc2_in[row * inter / 2 + i / 2];
    const uint8_t sf = out.fc2_in_scale[testing::spec_sf_offset(c.layout, row, i / 16, inter / 16)];
    v[i] = double(formats::e2m1_to_float((i % 2) ? b >> 4 : b & 0xF)) * formats::e4m3_to_float(sf) *
           out.row_scale[row];
  }
  return v;
}

/// Checks every valid row of gemm2_output; padded rows must still hold the 0xFFFF poison.
void check_fc2(const Case& c, const PipelineOut& out) {
  const int64_t h = c.dims.hidden, inter = c.dims.inter;
  const std::vector<bool> valid = testing::valid_rows(c);
  std::vector<int32_t> expert_of_row(static_cast<size_t>(c.max_padded), -1);
  for (int64_t pair = 0; pair < c.dims.tokens * c.dims.top_k; ++pair) {
    expert_of_row[c.tables.expanded_idx_to_permuted_idx[pair]] = c.ids[pair];
  }
  std::vector<std::vector<float>> w2(static_cast<size_t>(c.dims.experts));
  for (int64_t e = 0; e < c.dims.experts; ++e) w2[e] = dequantize_w2(c.weights, e);
  int64_t bad = 0;
  for (int64_t r = 0; r < c.max_padded; ++r) {
    if (!valid[r]) {
      for (int64_t j = 0; j < h; ++j) ASSERT_EQ(out.gemm2[r * h + j], 0xFFFF) << "padded row " << r;
      continue;
    }
    const std::vector<double> x = decode_fc2_input(c, out, r);
    const std::vector<float>& w = w2[expert_of_row[r]];
    for (int64_t j = 0; j < h; ++j) {
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t i = 0; i < inter; ++i) {
        sum += x[i] * w[j * inter + i];
        abs_sum += std::fabs(x[i] * w[j * inter + i]);
      }
      const double got = formats::bf16_to_float(out.gemm2[r * h + j]);
      if (!(std::fabs(got - sum) <= std::ldexp(std::fabs(sum), -8) + 1e-5 * abs_sum + 1e-30)) {
        if (bad++ < 5) {
          ADD_FAILURE() << name(c.family) << " row " << r << " col " << j << ": got " << got
                        << " want " << sum;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << name(c.family);
}

TEST(StepfunFc2, EveryFamilyAndScaleLayout) {
  for (const int64_t tile : {int64_t(8), int64_t(128)}) {
    Dims d;
    d.tokens = 12, d.hidden = 128, d.inter = 128, d.experts = 3, d.top_k = 2, d.tile = tile;
    for (Family f : kAllFamilies) {
      const Case c = testing::make_case(f, d);
      ASSERT_EQ(c.layout, tile <= 64 ? SfLayout::kR8C4 : SfLayout::kR128C4);
      check_fc2(c, testing::run_pipeline(c));
    }
  }
}

TEST(StepfunFc2, IntermediateSizeNotAMultipleOf128) {
  // I = 320: nvfp4 has 20 scale columns, mxfp8 10 (padded to 12 in the r8c4 swizzle).
  Dims d;
  d.tokens = 8, d.hidden = 64, d.inter = 320, d.experts = 2, d.top_k = 2, d.tile = 8;
  for (Family f : kAllFamilies) {
    const Case c = testing::make_case(f, d);
    check_fc2(c, testing::run_pipeline(c));
  }
}

TEST(StepfunFc2, InconsistentTablesThrowBeforeWriting) {
  Dims d;
  d.tokens = 8, d.hidden = 64, d.inter = 64, d.experts = 2, d.top_k = 2;
  Case c = testing::make_case(Family::kFP8, d);
  PipelineOut out;
  fc1(testing::fc1_problem(c, &out.fc1));
  const auto expect_invalid = [&](const Fc2Problem& p, const std::string& argument) {
    try {
      fc2(p);
      ADD_FAILURE() << "no error for " << argument;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
    for (uint16_t v : out.gemm2) ASSERT_EQ(v, 0xFFFF) << "written before the error";
  };
  const int32_t saved = c.tables.cta_idx_xy_to_batch_idx[1];
  c.tables.cta_idx_xy_to_batch_idx[1] = -1;
  expect_invalid(testing::fc2_problem(c, &out), "cta_idx_xy_to_batch_idx");
  c.tables.cta_idx_xy_to_batch_idx[1] = saved;
  Fc2Problem p = testing::fc2_problem(c, &out);
  p.rows = 4;  // shorter than the tiles' valid rows
  expect_invalid(p, "cta_idx_xy_to_mn_limit");
  p = testing::fc2_problem(c, &out);
  p.output2_scale_scalar = nullptr;
  expect_invalid(p, "output2_scale_scalar");
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
