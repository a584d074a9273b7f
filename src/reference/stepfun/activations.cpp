#include "reference/stepfun/activations.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/checked.h"
#include "core/parallel.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "formats/quantize.h"
#include "reference/stepfun/unpack.h"
#include "reference/stepfun/weights.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace reference {
namespace stepfun {

void check_activation_inputs(Family family, const TensorView& hidden, double a_gs) {
  ::cakemoe::stepfun::check_family(family);
  core::check_defined(hidden, "hidden");
  core::check_dtype(hidden, "hidden", {DType::kBF16});
  core::check_ndim(hidden, "hidden", 2);
  core::check_contiguous(hidden, "hidden");
  core::require(hidden.shape[0] > 0, "hidden", "needs T > 0 tokens, got " + hidden.describe());
  core::require_in_range(hidden.shape[0], 1, ::cakemoe::stepfun::kMaxNumTokens, "hidden",
                         "the number of tokens T");
  core::require_in_range(hidden.shape[1], 0, ::cakemoe::stepfun::kMaxHiddenSize, "hidden",
                         "the hidden size H");
  const int64_t vec = block_size(family) > 0 ? block_size(family) : 1;
  core::require(hidden.shape[1] > 0 && hidden.shape[1] % vec == 0, "hidden",
                std::string("family ") + ::cakemoe::stepfun::family_name(family) +
                    " needs H to be a positive multiple of " + std::to_string(vec) + ", got " +
                    hidden.describe());
  if (family == Family::kFP8 || family == Family::kNVFP4) {
    core::require(std::isfinite(a_gs) && a_gs > 0.0, "hidden_states_scale_global",
                  std::string("family ") + ::cakemoe::stepfun::family_name(family) +
                      " requires a calibrated activation encode scale > 0");
  }
}

StepFunActivations prepare_activations(Family family, const TensorView& hidden, double a_gs) {
  check_activation_inputs(family, hidden, a_gs);
  core::require_supported(hidden.device.type == DeviceType::kCPU, "hidden",
                          "the reference activation preparation reads CPU tensors");
  const int64_t tokens = hidden.shape[0], h = hidden.shape[1];
  const float global = static_cast<float>(a_gs);
  StepFunActivations out;
  switch (family) {
    case Family::kNVFP4:
    case Family::kNVFP4BF16Tok:
      out.hidden_states = Tensor::empty({tokens, h / 2}, DType::kE2M1x2);
      out.hidden_states_scale = Tensor::empty({tokens, h / formats::kNvfp4Block}, DType::kE4M3);
      if (family == Family::kNVFP4BF16Tok) {
        out.per_token_scale = Tensor::empty({tokens}, DType::kFP32);
      }
      break;
    case Family::kMXFP8:
      out.hidden_states = Tensor::empty({tokens, h}, DType::kE4M3);
      out.hidden_states_scale = Tensor::empty({tokens, h / formats::kMxfp8Block}, DType::kUE8M0);
      break;
    case Family::kFP8:
      out.hidden_states = Tensor::empty({tokens, h}, DType::kE4M3);
      break;
    case Family::kBF16:
      out.hidden_states = Tensor::empty({tokens, h}, DType::kBF16);
      std::memcpy(out.hidden_states.data(), hidden.data, hidden.nbytes());
      return out;
  }
  core::parallel_for(tokens, [&](int64_t t) {
    std::vector<float> x(static_cast<size_t>(h));
    const uint16_t* bits = hidden.ptr<uint16_t>() + t * h;
    for (int64_t k = 0; k < h; ++k) x[k] = formats::bf16_to_float(bits[k]);
    if (family == Family::kFP8) {
      uint8_t* q = out.hidden_states.ptr<uint8_t>() + t * h;
      for (int64_t k = 0; k < h; ++k) q[k] = formats::fp8_quantize(x[k], global);
    } else if (family == Family::kMXFP8) {
      uint8_t* q = out.hidden_states.ptr<uint8_t>() + t * h;
      uint8_t* sf = out.hidden_states_scale.ptr<uint8_t>() + t * (h / formats::kMxfp8Block);
      for (int64_t c = 0; c < h / formats::kMxfp8Block; ++c) {
        formats::mxfp8_quantize_block32(x.data() + c * formats::kMxfp8Block,
                                        q + c * formats::kMxfp8Block, sf + c);
      }
    } else {
      uint8_t* packed = out.hidden_states.ptr<uint8_t>() + t * (h / 2);
      uint8_t* sf = out.hidden_states_scale.ptr<uint8_t>() + t * (h / formats::kNvfp4Block);
      if (family == Family::kNVFP4BF16Tok) {
        // NOTE: spec §4.3: decode p = rowAmax/2688 (as rowAmax * (1/2688), the §6 numerics),
        // blocks encoded with 1/p; a zero row gives p = 0 and all-zero blocks.
        out.per_token_scale.ptr<float>()[t] =
            formats::nvfp4_per_token_quantize_row(x.data(), h, 1.0f / kNvfp4GlobalMax, packed, sf);
      } else {
        for (int64_t c = 0; c < h / formats::kNvfp4Block; ++c) {
          formats::nvfp4_quantize_block16(x.data() + c * formats::kNvfp4Block, global,
                                          packed + c * formats::kNvfp4Block / 2, sf + c);
        }
      }
    }
  });
  return out;
}

void load_activation_row(const ActivationMatrix& a, int64_t row, float* out) {
  const int64_t cols = a.cols;
  const float* e4m3 = e4m3_table();
  if (is_nvfp4_family(a.family)) {
    const int64_t num_sf_cols = cols / formats::kNvfp4Block;
    const auto* packed = static_cast<const uint8_t*>(a.data) + row * (cols / 2);
    const float* e2m1 = e2m1_table();
    for (int64_t c = 0; c < num_sf_cols; ++c) {
      const float sf = e4m3[a.scale[formats::sf_offset(a.scale_layout, row, c, num_sf_cols)]];
      unpack_nvfp4_block16(packed + c * 8, sf, e2m1, out + c * formats::kNvfp4Block);
    }
  } else if (a.family == Family::kFP8 || a.family == Family::kMXFP8) {
    const auto* q = static_cast<const uint8_t*>(a.data) + row * cols;
    for (int64_t k = 0; k < cols; ++k) out[k] = e4m3[q[k]];
    if (a.family == Family::kMXFP8) {
      const int64_t num_sf_cols = cols / formats::kMxfp8Block;
      for (int64_t c = 0; c < num_sf_cols; ++c) {
        const float s = formats::ue8m0_to_float(
            a.scale[formats::sf_offset(a.scale_layout, row, c, num_sf_cols)]);
        for (int64_t k = c * formats::kMxfp8Block; k < (c + 1) * formats::kMxfp8Block; ++k) {
          out[k] *= s;
        }
      }
    }
  } else {
    const auto* bits = static_cast<const uint16_t*>(a.data) + row * cols;
    for (int64_t k = 0; k < cols; ++k) out[k] = formats::bf16_to_float(bits[k]);
  }
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
