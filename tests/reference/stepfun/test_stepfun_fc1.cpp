// Reference FC1 (spec §5): the SwiGLUStep epilogue and output formats against fp64 expectations
// built from independently decoded operands, per-expert limits, untouched padded rows, and
// validation of the routing tables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cakemoe/errors.h"
#include "reference/stepfun/stepfun_gemm_testing.h"
#include "testbed/expect_error.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using testbed::expect_error;
using testing::Case;
using testing::Dims;
using testing::Fc1Out;
using testing::kAllFamilies;
using testing::name;

/// Hidden states [T, H] in real units, decoded from the prepared bytes with the spec formats.
std::vector<double> decode_hidden(const Case& c) {
  const int64_t tokens = c.dims.tokens, h = c.dims.hidden;
  const float a_gs = static_cast<float>(c.weights.view.hidden_states_scale_global);
  const uint8_t* q = c.acts.hidden_states.ptr<uint8_t>();
  const uint8_t* sf =
      c.acts.hidden_states_scale.defined() ? c.acts.hidden_states_scale.ptr<uint8_t>() : nullptr;
  std::vector<double> x(static_cast<size_t>(tokens * h));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < h; ++k) {
      double v = 0.0;
      switch (c.family) {
        case Family::kNVFP4:
        case Family::kNVFP4BF16Tok: {
          const uint8_t b = q[t * h / 2 + k / 2];
          v = double(formats::e2m1_to_float((k % 2) ? b >> 4 : b & 0xF)) *
              formats::e4m3_to_float(sf[t * h / 16 + k / 16]);
          v = c.family == Family::kNVFP4 ? v / a_gs : v * c.acts.per_token_scale.ptr<float>()[t];
          break;
        }
        case Family::kFP8:
          v = double(formats::e4m3_to_float(q[t * h + k])) / a_gs;
          break;
        case Family::kMXFP8:
          v = std::ldexp(double(formats::e4m3_to_float(q[t * h + k])),
                         sf[t * h / 32 + k / 32] - 127);
          break;
        case Family::kBF16:
          v = formats::bf16_to_float(c.hidden.ptr<uint16_t>()[t * h + k]);
          break;
      }
      x[t * h + k] = v;
    }
  }
  return x;
}

/// (up, gate) of a pair in real units: fp64 dot products of decoded operands.
void pre_activation(const Case& c, const std::vector<double>& x, const std::vector<float>& w1,
                    int64_t t, int64_t f, double* up, double* gate) {
  const int64_t h = c.dims.hidden;
  double u = 0.0, g = 0.0;
  for (int64_t k = 0; k < h; ++k) {
    u += x[t * h + k] * w1[f * h + k];
    g += x[t * h + k] * w1[(c.dims.inter + f) * h + k];
  }
  *up = u;
  *gate = g;
}

double swiglu_step(double up, double gate, double limit) {
  return std::min(gate / (1.0 + std::exp(-gate)), limit) * std::max(std::min(up, limit), -limit);
}

/// Per-element tolerance of a decoded FC1 output against the exact activation (spec §4.1 grids);
/// `c_gs` converts the fp8 subnormal quantum (2^-9) to real units.
double tolerance(Family f, double v, double block_amax, double c_gs) {
  switch (f) {
    case Family::kNVFP4:
      return 0.19 * block_amax + 1e-6;  // widest e2m1 step is 2 sf, sf <~ amax/6 * 17/16
    case Family::kFP8:
      return 0.0625 * std::fabs(v) + std::ldexp(1.0, -10) / c_gs;  // e4m3 + half subnormal step
    case Family::kMXFP8:
      return 0.0625 * std::fabs(v) + 1e-4 * block_amax + 1e-6;  // block scale ~ amax / 448
    default:
      return 0.008 * std::fabs(v) + 1e-4;  // bf16 rounding plus fp32 accumulation
  }
}

int64_t quant_block(Family f) { return f == Family::kNVFP4 ? 16 : f == Family::kMXFP8 ? 32 : 1; }

/// Compares a decoded FC1 row with its exact activation; returns the failures.
int64_t count_mismatches(const Case& c, const std::vector<double>& got,
                         const std::vector<double>& want, const std::string& what) {
  int64_t bad = 0;
  const Family f = c.family;
  const int64_t n = static_cast<int64_t>(want.size()), vec = quant_block(f);
  for (int64_t i = 0; i < n; ++i) {
    double amax = 0.0;
    for (int64_t j = (i / vec) * vec; j < (i / vec + 1) * vec; ++j)
      amax = std::max(amax, std::fabs(want[j]));
    if (!(std::fabs(got[i] - want[i]) <= tolerance(f, want[i], amax, c.c_gs()))) {
      if (bad++ < 5)
        ADD_FAILURE() << what << " feature " << i << ": got " << got[i] << " want " << want[i];
    }
  }
  return bad;
}

TEST(StepfunFc1, EpilogueHandValuesBothExpertLimits) {
  // x = e_0 and W1 rows holding (up, gate) in column 0 make the accumulators exactly (u, g).
  Dims d;
  d.tokens = 2, d.hidden = 64, d.inter = 64, d.experts = 2, d.top_k = 1, d.tile = 8;
  d.limits = {7.0f, 16.0f};
  const float up[] = {10, -12, 3, 2, -8, 6.5f, 0.5f};
  const float gate[] = {20, 20, -3, 2, 8, 7.5f, -20};
  // min(silu(g), L) * clamp(u, -L, L), evaluated by hand (silu(g) = g / (1 + e^-g)).
  const double want[2][7] = {
      {49, -49, -0.426832859, 3.52318831, -49, 45.5, -2.06115362e-08},
      {160, -192, -0.426832859, 3.52318831, -63.9785376, 48.723052, -2.06115362e-08}};
  Tensor hidden = Tensor::empty({2, 64}, DType::kBF16);
  Tensor w1 = Tensor::empty({2, 128, 64}, DType::kBF16);
  Tensor w2 = Tensor::empty({2, 64, 64}, DType::kBF16);
  for (const Tensor* t : {&hidden, &w1, &w2}) std::memset(t->data(), 0, t->nbytes());
  hidden.ptr<uint16_t>()[0] = hidden.ptr<uint16_t>()[64] = formats::bf16_from_float(1.0f);
  for (int64_t e = 0; e < 2; ++e) {
    for (int i = 0; i < 7; ++i) {
      w1.ptr<uint16_t>()[(e * 128 + i) * 64] = formats::bf16_from_float(up[i]);
      w1.ptr<uint16_t>()[(e * 128 + 64 + i) * 64] = formats::bf16_from_float(gate[i]);
    }
  }
  const Case c = testing::make_case_from(Family::kBF16, d, hidden, w1, w2, {0, 1}, {1.0f, 1.0f});
  Fc1Out out;
  fc1(testing::fc1_problem(c, &out));
  for (int64_t t = 0; t < 2; ++t) {
    const std::vector<double> got =
        testing::decode_fc1_row(c, out, c.tables.expanded_idx_to_permuted_idx[t]);
    for (int i = 0; i < 64; ++i) {
      const double w = i < 7 ? want[t][i] : 0.0;  // zero rows: 0 * silu(0) = 0
      EXPECT_NEAR(got[i], w, std::ldexp(std::fabs(w), -8)) << "expert " << t << " feature " << i;
    }
  }
}

TEST(StepfunFc1, EpilogueBothLimitBranchesTinyCase) {
  Dims d;
  d.tokens = 6, d.hidden = 64, d.inter = 64, d.experts = 1, d.top_k = 1, d.tile = 8;
  d.limits = {7.0f};
  for (Family f : kAllFamilies) {
    const Case c = testing::make_case(f, d);
    Fc1Out out;
    fc1(testing::fc1_problem(c, &out));
    const std::vector<double> x = decode_hidden(c);
    const std::vector<float> w1 = dequantize_w1(c.weights, 0);
    int64_t above = 0, below = 0, gate_capped = 0, inside = 0;
    for (int64_t t = 0; t < d.tokens; ++t) {
      const int32_t slot = c.tables.expanded_idx_to_permuted_idx[t];
      std::vector<double> want(static_cast<size_t>(d.inter));
      for (int64_t i = 0; i < d.inter; ++i) {
        double up, gate;
        pre_activation(c, x, w1, t, i, &up, &gate);
        above += up > 7.0, below += up < -7.0;
        gate_capped += gate / (1.0 + std::exp(-gate)) > 7.0;
        inside += std::fabs(up) < 7.0 && gate / (1.0 + std::exp(-gate)) < 7.0;
        want[i] = swiglu_step(up, gate, 7.0);
      }
      EXPECT_EQ(count_mismatches(c, testing::decode_fc1_row(c, out, slot), want,
                                 std::string(name(f)) + " token " + std::to_string(t)),
                0);
    }
    // The data exercises every branch of the clamps (spec §3.1).
    EXPECT_GT(above, 0) << name(f);
    EXPECT_GT(below, 0) << name(f);
    EXPECT_GT(gate_capped, 0) << name(f);
    EXPECT_GT(inside, 0) << name(f);
  }
}

TEST(StepfunFc1, PerExpertMixedLimitsMatchTheOracleActivation) {
  Dims d;
  d.tokens = 16, d.hidden = 256, d.inter = 128, d.experts = 4, d.top_k = 2, d.tile = 8;
  for (Family f : kAllFamilies) {
    const Case c = testing::make_case(f, d);
    Fc1Out out;
    fc1(testing::fc1_problem(c, &out));
    const OracleResult oracle = oracle_moe(c.oracle_problem());
    double amax_by_limit[2] = {0.0, 0.0};
    for (int64_t pair = 0; pair < d.tokens * d.top_k; ++pair) {
      const int32_t slot = c.tables.expanded_idx_to_permuted_idx[pair];
      ASSERT_GE(slot, 0);
      const std::vector<double> want(oracle.activation.begin() + pair * d.inter,
                                     oracle.activation.begin() + (pair + 1) * d.inter);
      const std::vector<double> got = testing::decode_fc1_row(c, out, slot);
      EXPECT_EQ(
          count_mismatches(c, got, want, std::string(name(f)) + " pair " + std::to_string(pair)),
          0);
      for (double v : got) {
        double& m = amax_by_limit[c.ids[pair] % 2];
        m = std::max(m, std::fabs(v));
      }
    }
    // Even experts (L = 7) stay within 49 (+ the output rounding); odd ones (L = 16) exceed it.
    EXPECT_LE(amax_by_limit[0], 49.0 * 1.07) << name(f);
    EXPECT_GT(amax_by_limit[1], 49.0 * 1.2) << name(f);
  }
}

TEST(StepfunFc1, PaddedRowsAndTheirScalesStayPoisoned) {
  for (const int64_t tile : {int64_t(8), int64_t(128)}) {
    Dims d;
    d.tokens = 12, d.hidden = 128, d.inter = 128, d.experts = 3, d.top_k = 2, d.tile = tile;
    for (Family f : kAllFamilies) {
      const Case c = testing::make_case(f, d, false);
      Fc1Out out;
      fc1(testing::fc1_problem(c, &out));
      const std::vector<bool> valid = testing::valid_rows(c);
      const int64_t row_bytes = testing::fc1_row_bytes(f, d.inter);
      const int64_t cols = testing::sf_cols(f, d.inter);
      std::vector<bool> sf_written(out.scale.size(), false);
      for (int64_t r = 0; r < c.max_padded; ++r) {
        for (int64_t b = 0; b < row_bytes; ++b) {
          if (!valid[r]) {
            ASSERT_EQ(out.data[r * row_bytes + b], 0xFF) << name(f) << " row " << r;
          }
        }
        for (int64_t col = 0; valid[r] && col < cols; ++col) {
          sf_written[testing::spec_sf_offset(c.layout, r, col, cols)] = true;
        }
      }
      int64_t written = 0;
      for (size_t i = 0; i < out.scale.size(); ++i) {
        if (!sf_written[i]) {
          ASSERT_EQ(out.scale[i], 0xFF) << name(f) << " SF byte " << i;
        }
        written += sf_written[i];
      }
      // Every valid row's scales were written (a poison 0xFF SF byte would be NaN for e4m3).
      for (size_t i = 0; i < out.scale.size() && f == Family::kNVFP4; ++i) {
        if (sf_written[i]) {
          ASSERT_NE(out.scale[i], 0xFF) << "SF byte " << i;
        }
      }
      if (f == Family::kBF16) {
        for (int64_t r = 0; r < c.max_padded; ++r) {
          for (int64_t b = 0; valid[r] && b < row_bytes; b += 2) {
            ASSERT_FALSE(out.data[r * row_bytes + b] == 0xFF &&
                         out.data[r * row_bytes + b + 1] == 0xFF)
                << "valid row " << r << " not written";
          }
        }
      }
      EXPECT_EQ(written, cols * std::count(valid.begin(), valid.end(), true)) << name(f);
    }
  }
}

TEST(StepfunFc1, InconsistentTablesThrowBeforeWriting) {
  Dims d;
  d.tokens = 8, d.hidden = 64, d.inter = 64, d.experts = 2, d.top_k = 2;
  Case c = testing::make_case(Family::kNVFP4, d, false);
  const Case pristine = c;
  Fc1Out out;
  const auto run = [&] { fc1(testing::fc1_problem(c, &out)); };
  const auto untouched = [&] {
    for (uint8_t b : out.data) ASSERT_EQ(b, 0xFF);
    for (uint8_t b : out.scale) ASSERT_EQ(b, 0xFF);
  };
  c.tables.cta_idx_xy_to_batch_idx[0] = 2;
  expect_error(run, "cta_idx_xy_to_batch_idx");
  untouched();
  c = pristine;
  c.tables.cta_idx_xy_to_mn_limit[0] = static_cast<int32_t>(d.tile + 1);
  expect_error(run, "cta_idx_xy_to_mn_limit");
  untouched();
  c = pristine;
  c.tables.permuted_idx_to_token_idx[0] = static_cast<int32_t>(d.tokens);
  expect_error(run, "permuted_idx_to_token_idx");
  untouched();
  c = pristine;
  expect_error(
      [&] {
        Fc1Problem p = testing::fc1_problem(c, &out);
        p.hidden_states_scale = nullptr;
        fc1(p);
      },
      "hidden_states_scale");
  untouched();
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
