#include "reference/stepfun/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/checked.h"
#include "core/parallel.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "formats/quantize.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using core::require;

std::string family_rule(Family family, const std::string& what) {
  return std::string("family ") + ::cakemoe::stepfun::family_name(family) + " " + what;
}

/// Encode scale max/amax of one expert (amax == 0: 1, so an all-zero expert stays all zeros).
float global_encode(float format_max, float amax) { return amax > 0.0f ? format_max / amax : 1.0f; }

float matrix_amax(const std::vector<float>& x) {
  return formats::block_amax(x.data(), static_cast<int>(x.size()));
}

/// Quantizes one expert's logical [rows, cols] matrix into its physical slots: row r goes to
/// physical row dst_row_of[r]; block scales go to the 128x4 swizzle of the permuted matrix.
void quantize_expert(Family family, const float* x, const uint16_t* bits, int64_t rows,
                     int64_t cols, const std::vector<int64_t>& dst_row_of, float global,
                     uint8_t* data, uint8_t* scale) {
  const int64_t vec = block_size(family);
  const int64_t num_sf_cols = vec > 0 ? cols / vec : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = dst_row_of[r];
    const float* src = x + r * cols;
    if (is_nvfp4_family(family)) {
      for (int64_t c = 0; c < num_sf_cols; ++c) {
        formats::nvfp4_quantize_block16(src + c * vec, global, data + p * (cols / 2) + c * vec / 2,
                                        scale + formats::sf_offset_128x4(p, c, num_sf_cols));
      }
    } else if (family == Family::kMXFP8) {
      for (int64_t c = 0; c < num_sf_cols; ++c) {
        formats::mxfp8_quantize_block32(src + c * vec, data + p * cols + c * vec,
                                        scale + formats::sf_offset_128x4(p, c, num_sf_cols));
      }
    } else if (family == Family::kFP8) {
      for (int64_t k = 0; k < cols; ++k) data[p * cols + k] = formats::fp8_quantize(src[k], global);
    } else {
      auto* dst = reinterpret_cast<uint16_t*>(data);
      for (int64_t k = 0; k < cols; ++k) {
        dst[formats::block_major_k_offset(p, k, rows)] = bits[r * cols + k];
      }
    }
  }
}

/// Allocates one GEMM's physical tensors for `experts` experts of [rows, cols].
void allocate_matrix(Family family, int64_t experts, int64_t rows, int64_t cols, Tensor* data,
                     Tensor* scale) {
  switch (family) {
    case Family::kNVFP4:
    case Family::kNVFP4BF16Tok:
      *data = Tensor::empty({experts, rows, cols / 2}, DType::kE2M1x2);
      break;
    case Family::kFP8:
    case Family::kMXFP8:
      *data = Tensor::empty({experts, rows, cols}, DType::kE4M3);
      break;
    case Family::kBF16:
      *data = Tensor::empty({experts, cols / formats::kBlockMajorK, rows, formats::kBlockMajorK},
                            DType::kBF16);
      break;
  }
  if (has_weight_block_scales(family)) {
    const int64_t num_sf_cols = cols / block_size(family);
    *scale = Tensor::empty(
        {experts, formats::ceil_div(rows, 128) * 128, formats::ceil_div(num_sf_cols, 4) * 4},
        family == Family::kMXFP8 ? DType::kUE8M0 : DType::kE4M3);
    std::memset(scale->data(), 0, scale->nbytes());  // swizzle padding bytes are 0 (§4.4 (c))
  }
}

Tensor per_expert_tensor(const std::vector<float>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kFP32);
  std::copy(values.begin(), values.end(), t.ptr<float>());
  return t;
}

/// Scalars of spec §4.3 and the clamp limit of §3.2 from the encode scales and c_gs.
void derive_scalars(PreparedWeights* w) {
  StepFunWeights& v = w->view;
  const Family family = v.family;
  const int64_t experts = w->dims.num_experts;
  std::vector<float> clamp(w->step_limits);
  if (has_output_scalars(family)) {
    std::vector<float> sg(experts), sc(experts), s2(experts);
    const double a_gs = static_cast<float>(v.hidden_states_scale_global);
    const double c_gs = static_cast<float>(v.intermediate_scale_global);
    for (int64_t e = 0; e < experts; ++e) {
      const double w1 = w->w1_global[e], w2 = w->w2_global[e];
      if (family == Family::kNVFP4BF16Tok) {
        // NOTE: spec §4.3 last bullet: sc = sg = w1 decode, output2 = w2 decode (real units).
        sg[e] = sc[e] = static_cast<float>(1.0 / w1);
        s2[e] = static_cast<float>(1.0 / w2);
      } else {
        sg[e] = static_cast<float>(1.0 / (w1 * a_gs));
        sc[e] = static_cast<float>(c_gs / (w1 * a_gs));
        s2[e] = static_cast<float>(1.0 / (c_gs * w2));
      }
      // NOTE: spec §3.2: raw-accumulator units, L / output1_scale_gate_scalar in fp32.
      clamp[e] = w->step_limits[e] / sg[e];
    }
    v.output1_scale_gate_scalar = per_expert_tensor(sg);
    v.output1_scale_scalar = per_expert_tensor(sc);
    v.output2_scale_scalar = per_expert_tensor(s2);
  }
  v.gemm1_clamp_limit = per_expert_tensor(clamp);
}

}  // namespace

bool is_nvfp4_family(Family f) { return f == Family::kNVFP4 || f == Family::kNVFP4BF16Tok; }
bool has_output_scalars(Family f) { return is_nvfp4_family(f) || f == Family::kFP8; }
bool has_weight_block_scales(Family f) { return is_nvfp4_family(f) || f == Family::kMXFP8; }

int64_t block_size(Family f) {
  if (is_nvfp4_family(f)) return formats::kNvfp4Block;
  return f == Family::kMXFP8 ? formats::kMxfp8Block : 0;
}

double default_intermediate_scale(Family family, const std::vector<float>& step_limits) {
  if (family != Family::kNVFP4 && family != Family::kFP8) return 0.0;
  double limit = 0.0;
  for (float l : step_limits) limit = std::max(limit, static_cast<double>(l));
  if (limit <= 0.0) return 0.0;
  // NOTE: |SwiGLUStep_L| <= L^2 (spec §3.1): the bound maps to the format's global maximum.
  const double format_max = family == Family::kNVFP4 ? kNvfp4GlobalMax : kFp8GlobalMax;
  return format_max / (limit * limit);
}

WeightDims check_weight_inputs(const TensorView& w1, const TensorView& w2,
                               const WeightPrepOptions& o) {
  ::cakemoe::stepfun::check_family(o.family);
  for (const auto& [t, name] : {std::make_pair(&w1, "w1"), std::make_pair(&w2, "w2")}) {
    core::check_defined(*t, name);
    core::check_dtype(*t, name, {DType::kBF16});
    core::check_ndim(*t, name, 3);
    core::check_contiguous(*t, name);
  }
  const int64_t experts = w1.shape[0], hidden = w1.shape[2];
  require(w1.shape[1] % 2 == 0, "w1", "must have 2*I rows ([up; gate]), got " + w1.describe());
  const int64_t inter = w1.shape[1] / 2;
  require(experts > 0, "w1", "needs at least one expert");
  core::require_in_range(experts, 1, ::cakemoe::stepfun::kMaxNumExperts, "w1",
                         "the expert count (dimension 0)");
  core::require_in_range(hidden, 1, ::cakemoe::stepfun::kMaxHiddenSize, "w1", "the hidden size H");
  core::require_in_range(inter, 0, ::cakemoe::stepfun::kMaxIntermediateSize, "w1",
                         "the intermediate size I");
  require(hidden > 0 && hidden % 64 == 0, "w1",
          "hidden size H must be a positive multiple of 64, got " + w1.describe());
  require(inter > 0 && inter % 64 == 0, "w1",
          "intermediate size I must be a positive multiple of 64, got " + w1.describe());
  core::check_shape(w2, "w2", {experts, hidden, inter});
  require(w1.device == w2.device, "w2", "must be on the device of w1");

  WeightDims dims;
  dims.hidden = hidden;
  dims.intermediate = inter;
  require(o.local_expert_offset >= 0 && o.local_expert_offset < experts, "local_expert_offset",
          "must lie in [0, " + std::to_string(experts) + ")");
  dims.num_experts =
      o.local_num_experts < 0 ? experts - o.local_expert_offset : o.local_num_experts;
  require(o.local_num_experts == -1 || o.local_num_experts > 0, "local_num_experts",
          "must be -1 (all) or > 0");
  // NOTE: written as a difference: the sum of two caller values may overflow.
  require(dims.num_experts <= experts - o.local_expert_offset, "local_num_experts",
          "local_expert_offset + local_num_experts must be <= " + std::to_string(experts));
  const size_t n = o.step_limits.size();
  require(n == 0 || n == 1 || n == static_cast<size_t>(dims.num_experts), "step_limits",
          "needs one limit per physical expert row (" + std::to_string(dims.num_experts) +
              "), or one value for all, got " + std::to_string(n));
  for (float l : o.step_limits) {
    require(std::isfinite(l) && l > 0.0f, "step_limits", "every limit must be finite and > 0");
  }
  const double a_gs = o.hidden_states_scale_global, c_gs = o.intermediate_scale_global;
  if (o.family == Family::kFP8 || o.family == Family::kNVFP4) {
    require(std::isfinite(a_gs) && a_gs > 0.0, "hidden_states_scale_global",
            family_rule(o.family, "requires a calibrated activation encode scale > 0"));
  }
  require(std::isfinite(c_gs) && c_gs >= 0.0, "intermediate_scale_global",
          "must be finite and >= 0 (0 = bound default)");
  return dims;
}

PreparedWeights prepare_weights(const TensorView& w1, const TensorView& w2,
                                const WeightPrepOptions& o) {
  const WeightDims dims = check_weight_inputs(w1, w2, o);
  core::require_supported(w1.device.type == DeviceType::kCPU, "w1",
                          "the reference weight preparation reads CPU tensors");
  const Family family = o.family;
  const int64_t experts = dims.num_experts, hidden = dims.hidden, inter = dims.intermediate;
  PreparedWeights out;
  out.dims = dims;
  out.view.family = family;
  out.step_limits.assign(static_cast<size_t>(experts),
                         o.step_limits.empty() ? kDefaultStepLimit : o.step_limits[0]);
  if (o.step_limits.size() > 1) out.step_limits = o.step_limits;
  if (has_output_scalars(family)) {
    out.w1_global.resize(experts);
    out.w2_global.resize(experts);
  }
  if (family == Family::kFP8 || family == Family::kNVFP4) {
    out.view.hidden_states_scale_global = o.hidden_states_scale_global;
    out.view.intermediate_scale_global = o.intermediate_scale_global > 0.0
                                             ? o.intermediate_scale_global
                                             : default_intermediate_scale(family, out.step_limits);
  }
  StepFunWeights& v = out.view;
  allocate_matrix(family, experts, 2 * inter, hidden, &v.gemm1_weights, &v.gemm1_weights_scale);
  allocate_matrix(family, experts, hidden, inter, &v.gemm2_weights, &v.gemm2_weights_scale);

  const std::vector<int64_t> w1_rows = formats::w1_row_map(inter);
  const std::vector<int64_t> w2_rows = formats::w2_row_map(hidden);
  const float format_max = is_nvfp4_family(family) ? kNvfp4GlobalMax : kFp8GlobalMax;
  const WeightMatrix m1 = gemm1_matrix(v, dims), m2 = gemm2_matrix(v, dims);
  const int64_t w1_elems = 2 * inter * hidden, w2_elems = hidden * inter;
  core::parallel_for(2 * experts, [&](int64_t task) {
    const bool first = task % 2 == 0;
    const int64_t e = task / 2;
    const WeightMatrix& m = first ? m1 : m2;
    const int64_t elems = first ? w1_elems : w2_elems;
    const uint16_t* bits = (first ? w1 : w2).ptr<uint16_t>() + (o.local_expert_offset + e) * elems;
    std::vector<float> x(static_cast<size_t>(elems));
    for (int64_t i = 0; i < elems; ++i) x[i] = formats::bf16_to_float(bits[i]);
    float global = 1.0f;
    if (has_output_scalars(family)) {
      global = global_encode(format_max, matrix_amax(x));
      (first ? out.w1_global : out.w2_global)[e] = global;
    }
    const int64_t row_bytes =
        m.cols * (family == Family::kBF16 ? 2 : 1) / (is_nvfp4_family(family) ? 2 : 1);
    uint8_t* data = static_cast<uint8_t*>(const_cast<void*>(m.data)) + e * m.rows * row_bytes;
    uint8_t* scale = has_weight_block_scales(family)
                         ? const_cast<uint8_t*>(m.scale) +
                               e * formats::sf_size_128x4(m.rows, m.cols / block_size(family))
                         : nullptr;
    quantize_expert(family, x.data(), bits, m.rows, m.cols, first ? w1_rows : w2_rows, global, data,
                    scale);
  });
  derive_scalars(&out);
  return out;
}

void set_intermediate_scale(PreparedWeights* w, double c_gs) {
  const Family family = w->view.family;
  if (family != Family::kNVFP4 && family != Family::kFP8) return;
  require(std::isfinite(c_gs) && c_gs > 0.0, "intermediate_scale_global", "must be finite and > 0");
  w->view.intermediate_scale_global = c_gs;
  derive_scalars(w);
}

std::array<Tensor*, 8> weight_tensors(StepFunWeights* w) {
  return {&w->gemm1_weights,        &w->gemm1_weights_scale,      &w->gemm2_weights,
          &w->gemm2_weights_scale,  &w->output1_scale_scalar,     &w->output1_scale_gate_scalar,
          &w->output2_scale_scalar, &w->gemm1_clamp_limit};
}

void set_weight_args(::cakemoe::stepfun::MoeArgs* args, const StepFunWeights& weights) {
  args->gemm1_weights = weights.gemm1_weights;
  args->gemm1_weights_scale = weights.gemm1_weights_scale;
  args->output1_scale_scalar = weights.output1_scale_scalar;
  args->output1_scale_gate_scalar = weights.output1_scale_gate_scalar;
  args->gemm1_clamp_limit = weights.gemm1_clamp_limit;
  args->gemm2_weights = weights.gemm2_weights;
  args->gemm2_weights_scale = weights.gemm2_weights_scale;
  args->output2_scale_scalar = weights.output2_scale_scalar;
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
