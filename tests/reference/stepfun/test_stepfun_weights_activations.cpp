// Activation preparation (spec §4.2, §4.3): the family input formats, the per-token family's
// decode scales, and argument validation of the public prepare_activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cakemoe/errors.h"
#include "formats/quantize.h"
#include "reference/stepfun/activations.h"
#include "reference/stepfun/stepfun_gemm_testing.h"
#include "testbed/expect_error.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using testbed::expect_error;
using testing::floats_of;
using testing::name;

bool same_bytes(const Tensor& t, const std::vector<uint8_t>& want) {
  return static_cast<size_t>(t.nbytes()) == want.size() &&
         std::memcmp(t.data(), want.data(), want.size()) == 0;
}

TEST(StepfunActivations, EveryFamilyFormat) {
  const int64_t tokens = 5, hidden = 128;
  testbed::Rng rng(21);
  Tensor hidden_bf16 = testing::random_bf16({tokens, hidden}, rng, 12.0f);
  // Row 3 is all zeros (per-token: p = 0, everything encodes to 0).
  std::memset(hidden_bf16.ptr<uint16_t>() + 3 * hidden, 0, hidden * 2);
  const std::vector<float> x = floats_of(hidden_bf16);
  const float a_gs = 41.0f;

  StepFunActivations a = reference::stepfun::prepare_activations(Family::kNVFP4, hidden_bf16, a_gs);
  formats::Nvfp4Matrix nv = formats::nvfp4_quantize_matrix(x.data(), tokens, hidden, a_gs);
  EXPECT_EQ(a.hidden_states.dtype(), DType::kE2M1x2);
  EXPECT_TRUE(same_bytes(a.hidden_states, nv.packed));
  EXPECT_TRUE(same_bytes(a.hidden_states_scale, nv.sf)) << "linear [T, H/16] e4m3";
  EXPECT_FALSE(a.per_token_scale.defined());

  a = reference::stepfun::prepare_activations(Family::kMXFP8, hidden_bf16, 0.0);
  formats::Mxfp8Matrix mx = formats::mxfp8_quantize_matrix(x.data(), tokens, hidden);
  EXPECT_TRUE(same_bytes(a.hidden_states, mx.q));
  EXPECT_TRUE(same_bytes(a.hidden_states_scale, mx.sf)) << "linear [T, H/32] ue8m0";
  EXPECT_EQ(a.hidden_states_scale.dtype(), DType::kUE8M0);

  a = reference::stepfun::prepare_activations(Family::kFP8, hidden_bf16, a_gs);
  EXPECT_TRUE(
      same_bytes(a.hidden_states, formats::fp8_quantize_matrix(x.data(), tokens, hidden, a_gs)));
  EXPECT_FALSE(a.hidden_states_scale.defined());

  a = reference::stepfun::prepare_activations(Family::kBF16, hidden_bf16, 0.0);
  EXPECT_EQ(0, std::memcmp(a.hidden_states.data(), hidden_bf16.data(), hidden_bf16.nbytes()));

  // Per-token family: decode scale rowAmax/2688, blocks encoded with its reciprocal.
  a = reference::stepfun::prepare_activations(Family::kNVFP4BF16Tok, hidden_bf16, 0.0);
  ASSERT_TRUE(a.per_token_scale.defined());
  const float* pts = a.per_token_scale.ptr<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    float amax = 0.0f;
    for (int64_t k = 0; k < hidden; ++k) amax = std::max(amax, std::fabs(x[t * hidden + k]));
    EXPECT_NEAR(pts[t], amax / 2688.0, 1e-6 * amax / 2688.0) << "token " << t;
    const std::vector<float> back = formats::nvfp4_dequantize_matrix(
        a.hidden_states.ptr<uint8_t>() + t * hidden / 2,
        a.hidden_states_scale.ptr<uint8_t>() + t * hidden / 16, 1, hidden, pts[t]);
    for (int64_t k = 0; k < hidden; ++k) {
      // NVFP4 error bound: half the widest e2m1 step (1 * sf) with sf <~ blockAmax/6 * 17/16.
      EXPECT_NEAR(back[k], x[t * hidden + k], 0.19 * amax + 1e-6) << "token " << t;
    }
  }
  EXPECT_EQ(pts[3], 0.0f);
  for (int64_t k = 0; k < hidden / 2; ++k) EXPECT_EQ(a.hidden_states.ptr<uint8_t>()[3 * 64 + k], 0);
}

TEST(StepfunActivations, ValidationNamesTheArgument) {
  const auto prep = [](Family f, const TensorView& h, double a_gs) {
    return ::cakemoe::stepfun::prepare_activations(f, h, a_gs);
  };
  testbed::Rng rng(22);
  Tensor h = testing::random_bf16({4, 64}, rng, 1.0f);
  expect_error([&] { prep(Family::kFP8, h, 0.0); }, "hidden_states_scale_global", false);
  expect_error([&] { prep(Family::kNVFP4, h, NAN); }, "hidden_states_scale_global", false);
  EXPECT_NO_THROW(prep(Family::kNVFP4BF16Tok, h, 0.0));
  Tensor odd = testing::random_bf16({4, 48}, rng, 1.0f);
  expect_error([&] { prep(Family::kMXFP8, odd, 0.0); }, "hidden", false);
  TensorView cuda = h.view();
  cuda.device = Device::cuda(1);
  expect_error([&] { prep(Family::kBF16, cuda, 0.0); }, "hidden", true);
  TensorView fp32 = h.view();
  fp32.dtype = DType::kFP32;
  expect_error([&] { prep(Family::kBF16, fp32, 0.0); }, "hidden", false);
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
