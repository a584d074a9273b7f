#include "stepfun/validate.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "core/checked.h"
#include "formats/layouts.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace stepfun {
namespace {

using core::check_absent;
using core::check_defined;
using core::check_device;
using core::check_min_numel;
using core::check_operand;
using core::check_shape;
using core::checked_mul;
using core::require;
using core::require_in_range;

const std::initializer_list<DType> kByteE4M3 = {DType::kE4M3, DType::kUInt8};
const std::initializer_list<DType> kByteUE8M0 = {DType::kUE8M0, DType::kUInt8};
const std::initializer_list<DType> kByteFP4 = {DType::kE2M1x2, DType::kUInt8};
const std::initializer_list<DType> kInt32 = {DType::kInt32};
const std::initializer_list<DType> kFP32 = {DType::kFP32};

using reference::stepfun::has_output_scalars;
using reference::stepfun::has_weight_block_scales;
using reference::stepfun::is_nvfp4_family;

std::string family_rule(Family f, const std::string& what) {
  return std::string("family ") + family_name(f) + " " + what;
}

/// A [1] int32 device scalar (exactly [1], spec §9.3).
void check_scalar(const TensorView& t, const std::string& arg, Device device) {
  check_operand(t, arg, kInt32, device);
  core::check_vector(t, arg, 1);
}

void check_tile(int64_t tile) {
  require_in_range(tile, 1, kMaxTileTokensDim, "tile_tokens_dim", "tile_tokens_dim");
}

void check_top_k(int64_t top_k) { require_in_range(top_k, 1, kMaxTopK, "top_k", "top_k"); }

void check_num_tokens(int64_t t, const std::string& arg) {
  require_in_range(t, 1, kMaxNumTokens, arg, "the number of tokens T");
}

/// An int32 table with at least `min_numel` entries.
void check_table(const TensorView& t, const std::string& arg, Device device, int64_t min_numel) {
  check_operand(t, arg, kInt32, device);
  check_min_numel(t, arg, min_numel);
}

/// Per-expert fp32 vector [E_loc].
void check_per_expert(const TensorView& t, const std::string& arg, Device device, int64_t e_loc) {
  check_operand(t, arg, kFP32, device);
  check_shape(t, arg, {e_loc});
}

/// Block-scale bytes of a weight: 128x4-swizzled [rows, K/vec] per expert.
void check_weight_scale(Family family, const TensorView& s, const std::string& arg, Device device,
                        int64_t e_loc, int64_t rows, int64_t k) {
  if (has_weight_block_scales(family)) {
    const int64_t vec = family == Family::kMXFP8 ? 32 : 16;
    check_operand(s, arg, family == Family::kMXFP8 ? kByteUE8M0 : kByteE4M3, device);
    const int64_t bytes =
        checked_mul(e_loc, formats::checked_sf_size(SfLayout::kR128C4, rows, k / vec, arg), arg,
                    "the block-scale size");
    require(s.numel() == bytes, arg,
            family_rule(family, "needs the 128x4-swizzled block scales of [E_loc, " +
                                    std::to_string(rows) + ", " + std::to_string(k / vec) + "] (" +
                                    std::to_string(bytes) + " bytes), got " + s.describe()));
  } else {
    check_absent(s, arg, family_rule(family, "has no weight block scales"));
  }
}

void check_scalars(Family family, const TensorView& s, const std::string& arg, Device device,
                   int64_t e_loc) {
  if (has_output_scalars(family)) {
    check_per_expert(s, arg, device, e_loc);
  } else {
    check_absent(s, arg, family_rule(family, "takes no per-expert output scalars"));
  }
}

/// FC1-output / FC2-input activation tensor and its scales.
void check_fc2_input(Family family, const TensorView& x, const TensorView& sf,
                     const std::string& arg, const std::string& sf_arg, Device device, int64_t rows,
                     int64_t inter, SfLayout layout, bool fc1_side) {
  check_defined(x, arg);
  // nvfp4_bf16tok's FC1 writes bf16; its FC2 input is the requantized e2m1.
  const bool fp4 = is_nvfp4_family(family) && !(family == Family::kNVFP4BF16Tok && fc1_side);
  if (fp4) {
    check_operand(x, arg, kByteFP4, device);
    check_shape(x, arg, {-1, inter / 2});
  } else if (family == Family::kFP8 || family == Family::kMXFP8) {
    check_operand(x, arg, kByteE4M3, device);
    check_shape(x, arg, {-1, inter});
  } else {
    check_operand(x, arg, {DType::kBF16}, device);
    check_shape(x, arg, {-1, inter});
  }
  // NOTE: spec §9.3: FC1 writes exactly max_padded rows; FC2 reads at least that many.
  if (fc1_side) {
    require(x.shape[0] == rows, arg,
            "needs exactly max_padded = " + std::to_string(rows) + " rows, got " + x.describe());
  } else {
    require(x.shape[0] >= rows, arg,
            "needs at least max_padded = " + std::to_string(rows) + " rows, got " + x.describe());
  }
  if (fp4 || family == Family::kMXFP8) {
    check_operand(sf, sf_arg, family == Family::kMXFP8 ? kByteUE8M0 : kByteE4M3, device);
    check_min_numel(sf, sf_arg, act_scale_bytes(family, layout, x.shape[0], inter, sf_arg));
  } else {
    check_absent(sf, sf_arg, family_rule(family, "has no activation block scales here"));
  }
}

}  // namespace

TableSizes table_sizes(int64_t num_tokens, int64_t top_k, int64_t local_num_experts, int64_t tile) {
  const TableSizes sizes{max_ctas(num_tokens, top_k, local_num_experts, tile),
                         max_padded(num_tokens, top_k, local_num_experts, tile)};
  // NOTE: the routing tables hold int32 slots and permuted_idx_to_token_idx has max_padded + 1.
  require(sizes.max_padded < core::kInt32Max, "tile_tokens_dim",
          "max_padded + 1 = " + std::to_string(sizes.max_padded + 1) + " (T " +
              std::to_string(num_tokens) + ", top_k " + std::to_string(top_k) + ", experts " +
              std::to_string(local_num_experts) + ", tile " + std::to_string(tile) +
              ") must fit in int32");
  return sizes;
}

int64_t act_scale_bytes(Family family, SfLayout layout, int64_t rows, int64_t intermediate,
                        const std::string& arg) {
  const int64_t cols = intermediate / (family == Family::kMXFP8 ? 32 : 16);
  return formats::checked_sf_size(layout, rows, cols, arg);
}

SfLayout act_sf_layout(int64_t tile) { return tile <= 64 ? SfLayout::kR8C4 : SfLayout::kR128C4; }

/// Derives (E_loc, H, I) from a W1 or W2 view: W1 has 2I rows over K = H, W2 has H rows over K = I.
GemmDims weight_dims(Family family, const TensorView& w, bool is_w1, Device device) {
  const std::string arg = is_w1 ? "gemm1_weights" : "gemm2_weights";
  check_defined(w, arg);
  GemmDims d;
  int64_t rows = 0, k = 0;
  if (family == Family::kBF16) {
    check_operand(w, arg, {DType::kBF16}, device);
    check_shape(w, arg, {-1, -1, -1, 64});  // BlockMajorK [E, K/64, rows, 64]
    rows = w.shape[2];
    k = checked_mul(w.shape[1], 64, arg, "the hidden / intermediate size");
  } else {
    check_operand(w, arg, is_nvfp4_family(family) ? kByteFP4 : kByteE4M3, device);
    check_shape(w, arg, {-1, -1, -1});
    rows = w.shape[1];
    k = checked_mul(w.shape[2], is_nvfp4_family(family) ? 2 : 1, arg,
                    "the hidden / intermediate size");
  }
  d.num_local_experts = w.shape[0];
  require_in_range(d.num_local_experts, 1, kMaxNumExperts, arg,
                   "the local expert count (dimension 0)");
  if (is_w1) {
    require(rows % 2 == 0, arg, "must have 2*I rows ([up; gate] interleaved)");
    d.intermediate = rows / 2;
    d.hidden = k;
  } else {
    d.hidden = rows;
    d.intermediate = k;
  }
  require(d.hidden > 0 && d.hidden % 64 == 0, arg, "hidden size must be a positive multiple of 64");
  require(d.intermediate > 0 && d.intermediate % 64 == 0, arg,
          "intermediate size must be a positive multiple of 64");
  require_in_range(d.hidden, 64, kMaxHiddenSize, arg, "the hidden size H");
  require_in_range(d.intermediate, 64, kMaxIntermediateSize, arg, "the intermediate size I");
  return d;
}

RoutingDims validate_routing(const RoutingArgs& a) {
  core::check_given({{a.routing_logits, "routing_logits"},
                     {a.topk_ids, "topk_ids"},
                     {a.topk_weights, "topk_weights"},
                     {a.topk_packed, "topk_packed"},
                     {a.expert_count_histogram, "expert_count_histogram"},
                     {a.total_num_padded_tokens, "total_num_padded_tokens"},
                     {a.expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx"},
                     {a.permuted_idx_to_token_idx, "permuted_idx_to_token_idx"},
                     {a.cta_idx_xy_to_batch_idx, "cta_idx_xy_to_batch_idx"},
                     {a.cta_idx_xy_to_mn_limit, "cta_idx_xy_to_mn_limit"},
                     {a.num_non_exiting_ctas, "num_non_exiting_ctas"},
                     {a.num_tokens_per_expert, "num_tokens_per_expert"}});
  RoutingDims d;
  require(a.routing_logits.defined() != a.topk_ids.defined(), "routing_logits",
          "exactly one of routing_logits and topk_ids must be given");
  const TensorView& input = a.routing_logits.defined() ? a.routing_logits : a.topk_ids;
  d.device = input.device;
  d.logits_input = a.routing_logits.defined();
  require(a.num_experts > 0 && a.num_experts <= kMaxNumExperts, "num_experts",
          "must be in [1, 65535]");
  require(a.top_k >= 1 && a.top_k <= a.num_experts, "top_k",
          "must satisfy 1 <= top_k <= num_experts");
  require(a.top_k <= kMaxTopK, "top_k", "must be at most 32");
  require(a.local_num_experts > 0, "local_num_experts", "must be > 0");
  require(a.local_expert_offset >= 0, "local_expert_offset", "must be >= 0");
  // NOTE: written as a difference: the sum of two caller values may overflow.
  require(a.local_expert_offset <= a.num_experts &&
              a.local_num_experts <= a.num_experts - a.local_expert_offset,
          "local_num_experts", "local_expert_offset + local_num_experts must be <= num_experts");
  require(a.tile_tokens_dim > 0, "tile_tokens_dim", "must be > 0");
  check_tile(a.tile_tokens_dim);
  if (d.logits_input) {
    check_operand(a.routing_logits, "routing_logits", {DType::kBF16, DType::kFP32}, d.device);
    check_shape(a.routing_logits, "routing_logits", {-1, a.num_experts});
    d.logits_fp32 = a.routing_logits.dtype == DType::kFP32;
    d.num_tokens = a.routing_logits.shape[0];
  } else {
    require(a.routed_scaling_factor == 1.0, "routed_scaling_factor",
            "applies only to FromLogits routing; bake it into precomputed topk_weights");
    check_operand(a.topk_ids, "topk_ids", kInt32, d.device);
    check_shape(a.topk_ids, "topk_ids", {-1, a.top_k});
    d.num_tokens = a.topk_ids.shape[0];
  }
  require(d.num_tokens > 0, d.logits_input ? "routing_logits" : "topk_ids", "needs T > 0 tokens");
  check_num_tokens(d.num_tokens, d.logits_input ? "routing_logits" : "topk_ids");
  const int64_t t = d.num_tokens;
  check_defined(a.topk_weights, "topk_weights");
  if (d.logits_input) {
    check_operand(a.topk_weights, "topk_weights", {DType::kBF16}, d.device);
    check_operand(a.topk_packed, "topk_packed", kInt32, d.device);
    check_shape(a.topk_packed, "topk_packed", {t, a.top_k});
  } else {
    check_operand(a.topk_weights, "topk_weights", {DType::kBF16, DType::kFP32}, d.device);
    d.weights_fp32 = a.topk_weights.dtype == DType::kFP32;
  }
  check_shape(a.topk_weights, "topk_weights", {t, a.top_k});
  require(std::isfinite(a.routed_scaling_factor) && a.routed_scaling_factor > 0.0,
          "routed_scaling_factor", "must be finite and > 0");
  // NOTE: spec §2.5 DECISION: routing buffers are sized with the global E (never too small); the
  // GEMM stages only need the E_loc bound, which is never larger.
  const TableSizes sizes = table_sizes(t, a.top_k, a.num_experts, a.tile_tokens_dim);
  check_table(a.expert_count_histogram, "expert_count_histogram", d.device, 2 * a.num_experts);
  check_scalar(a.total_num_padded_tokens, "total_num_padded_tokens", d.device);
  check_table(a.expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx", d.device,
              checked_mul(t, a.top_k, "topk_ids", "T * top_k"));
  check_table(a.permuted_idx_to_token_idx, "permuted_idx_to_token_idx", d.device, sizes.max_padded);
  check_table(a.cta_idx_xy_to_batch_idx, "cta_idx_xy_to_batch_idx", d.device, sizes.max_ctas);
  check_table(a.cta_idx_xy_to_mn_limit, "cta_idx_xy_to_mn_limit", d.device, sizes.max_ctas);
  check_scalar(a.num_non_exiting_ctas, "num_non_exiting_ctas", d.device);
  if (a.num_tokens_per_expert.defined()) {
    check_table(a.num_tokens_per_expert, "num_tokens_per_expert", d.device, a.local_num_experts);
  }
  return d;
}

GemmDims validate_fc1(const Fc1Args& a) {
  core::check_given({{a.hidden_states, "hidden_states"},
                     {a.hidden_states_scale, "hidden_states_scale"},
                     {a.gemm1_weights, "gemm1_weights"},
                     {a.gemm1_weights_scale, "gemm1_weights_scale"},
                     {a.output1_scale_scalar, "output1_scale_scalar"},
                     {a.output1_scale_gate_scalar, "output1_scale_gate_scalar"},
                     {a.gemm1_clamp_limit, "gemm1_clamp_limit"},
                     {a.per_token_scale, "per_token_scale"},
                     {a.permuted_idx_to_token_idx, "permuted_idx_to_token_idx"},
                     {a.cta_idx_xy_to_batch_idx, "cta_idx_xy_to_batch_idx"},
                     {a.cta_idx_xy_to_mn_limit, "cta_idx_xy_to_mn_limit"},
                     {a.num_non_exiting_ctas, "num_non_exiting_ctas"},
                     {a.total_num_padded_tokens, "total_num_padded_tokens"},
                     {a.gemm1_output, "gemm1_output"},
                     {a.gemm1_output_scale, "gemm1_output_scale"}});
  const Family f = a.family;
  check_family(f);
  const Device device = a.hidden_states.device;
  check_defined(a.hidden_states, "hidden_states");
  const GemmDims d = weight_dims(f, a.gemm1_weights, true, device);
  const int64_t h = d.hidden, inter = d.intermediate, e = d.num_local_experts;
  // Activation input (spec §4.2).
  if (is_nvfp4_family(f)) {
    check_operand(a.hidden_states, "hidden_states", kByteFP4, device);
    check_shape(a.hidden_states, "hidden_states", {-1, h / 2});
    check_operand(a.hidden_states_scale, "hidden_states_scale", kByteE4M3, device);
    check_shape(a.hidden_states_scale, "hidden_states_scale", {a.hidden_states.shape[0], h / 16});
  } else if (f == Family::kMXFP8) {
    check_operand(a.hidden_states, "hidden_states", kByteE4M3, device);
    check_shape(a.hidden_states, "hidden_states", {-1, h});
    check_operand(a.hidden_states_scale, "hidden_states_scale", kByteUE8M0, device);
    check_shape(a.hidden_states_scale, "hidden_states_scale", {a.hidden_states.shape[0], h / 32});
  } else {
    check_operand(a.hidden_states, "hidden_states",
                  f == Family::kFP8 ? kByteE4M3 : std::initializer_list<DType>{DType::kBF16},
                  device);
    check_shape(a.hidden_states, "hidden_states", {-1, h});
    check_absent(a.hidden_states_scale, "hidden_states_scale",
                 family_rule(f, "takes no activation block scales"));
  }
  const int64_t t = a.hidden_states.shape[0];
  require(t > 0, "hidden_states", "needs T > 0 tokens");
  check_num_tokens(t, "hidden_states");
  require(a.top_k > 0, "top_k", "must be > 0");
  check_top_k(a.top_k);
  require(a.tile_tokens_dim > 0, "tile_tokens_dim", "must be > 0");
  check_tile(a.tile_tokens_dim);
  check_weight_scale(f, a.gemm1_weights_scale, "gemm1_weights_scale", device, e, 2 * inter, h);
  check_scalars(f, a.output1_scale_scalar, "output1_scale_scalar", device, e);
  check_scalars(f, a.output1_scale_gate_scalar, "output1_scale_gate_scalar", device, e);
  check_per_expert(a.gemm1_clamp_limit, "gemm1_clamp_limit", device, e);
  if (f == Family::kNVFP4BF16Tok) {
    check_operand(a.per_token_scale, "per_token_scale", kFP32, device);
    check_min_numel(a.per_token_scale, "per_token_scale", t);
  } else {
    check_absent(a.per_token_scale, "per_token_scale", family_rule(f, "has no per-token scales"));
  }
  const TableSizes sizes = table_sizes(t, a.top_k, e, a.tile_tokens_dim);
  check_table(a.permuted_idx_to_token_idx, "permuted_idx_to_token_idx", device, sizes.max_padded);
  check_table(a.cta_idx_xy_to_batch_idx, "cta_idx_xy_to_batch_idx", device, sizes.max_ctas);
  check_table(a.cta_idx_xy_to_mn_limit, "cta_idx_xy_to_mn_limit", device, sizes.max_ctas);
  check_scalar(a.num_non_exiting_ctas, "num_non_exiting_ctas", device);
  check_scalar(a.total_num_padded_tokens, "total_num_padded_tokens", device);
  const SfLayout layout = act_sf_layout(a.tile_tokens_dim);
  check_fc2_input(f, a.gemm1_output, a.gemm1_output_scale, "gemm1_output", "gemm1_output_scale",
                  device, sizes.max_padded, inter, layout, true);
  return d;
}

int64_t validate_requant(const RequantArgs& a) {
  core::check_given({{a.gemm1_output, "gemm1_output"},
                     {a.expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx"},
                     {a.output, "output"},
                     {a.output_scale, "output_scale"},
                     {a.per_token_scale, "per_token_scale"}});
  check_defined(a.gemm1_output, "gemm1_output");
  const Device device = a.gemm1_output.device;
  check_operand(a.gemm1_output, "gemm1_output", {DType::kBF16}, device);
  check_shape(a.gemm1_output, "gemm1_output", {-1, -1});
  const int64_t rows = a.gemm1_output.shape[0], inter = a.gemm1_output.shape[1];
  require(inter > 0 && inter % 16 == 0, "gemm1_output",
          "columns must be a positive multiple of 16");
  check_operand(a.expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx", kInt32, device);
  check_operand(a.output, "output", kByteFP4, device);
  check_shape(a.output, "output", {rows, inter / 2});
  check_operand(a.output_scale, "output_scale", kByteE4M3, device);
  check_sf_layout(a.sf_layout, "sf_layout");
  // NOTE: expanded_idx_to_permuted_idx holds int32 row indices.
  require(rows <= core::kInt32Max, "gemm1_output",
          "rows must fit in int32, got " + a.gemm1_output.describe());
  if (a.sf_layout == SfLayout::kR128C4) {
    require(rows % 128 == 0, "sf_layout", "r128c4 needs a multiple of 128 rows");
  } else if (a.sf_layout == SfLayout::kR8C4) {
    require(rows % 8 == 0, "sf_layout", "r8c4 needs a multiple of 8 rows");
  }
  check_min_numel(a.output_scale, "output_scale",
                  formats::checked_sf_size(a.sf_layout, rows, inter / 16, "output_scale"));
  check_operand(a.per_token_scale, "per_token_scale", kFP32, device);
  check_min_numel(a.per_token_scale, "per_token_scale", rows);
  require(std::isfinite(a.global_scale_inv) && a.global_scale_inv > 0.0, "global_scale_inv",
          "must be finite and > 0");
  return rows;
}

GemmDims validate_fc2(const Fc2Args& a) {
  core::check_given({{a.gemm2_input, "gemm2_input"},
                     {a.gemm2_input_scale, "gemm2_input_scale"},
                     {a.gemm2_weights, "gemm2_weights"},
                     {a.gemm2_weights_scale, "gemm2_weights_scale"},
                     {a.output2_scale_scalar, "output2_scale_scalar"},
                     {a.per_token_scale, "per_token_scale"},
                     {a.cta_idx_xy_to_batch_idx, "cta_idx_xy_to_batch_idx"},
                     {a.cta_idx_xy_to_mn_limit, "cta_idx_xy_to_mn_limit"},
                     {a.num_non_exiting_ctas, "num_non_exiting_ctas"},
                     {a.gemm2_output, "gemm2_output"}});
  const Family f = a.family;
  check_family(f);
  check_defined(a.gemm2_input, "gemm2_input");
  const Device device = a.gemm2_input.device;
  const GemmDims d = weight_dims(f, a.gemm2_weights, false, device);
  const int64_t e = d.num_local_experts;
  require(a.num_tokens > 0, "num_tokens", "must be > 0");
  check_num_tokens(a.num_tokens, "num_tokens");
  require(a.top_k > 0, "top_k", "must be > 0");
  check_top_k(a.top_k);
  require(a.tile_tokens_dim > 0, "tile_tokens_dim", "must be > 0");
  check_tile(a.tile_tokens_dim);
  const TableSizes sizes = table_sizes(a.num_tokens, a.top_k, e, a.tile_tokens_dim);
  const SfLayout layout = act_sf_layout(a.tile_tokens_dim);
  check_fc2_input(f, a.gemm2_input, a.gemm2_input_scale, "gemm2_input", "gemm2_input_scale", device,
                  sizes.max_padded, d.intermediate, layout, false);
  check_weight_scale(f, a.gemm2_weights_scale, "gemm2_weights_scale", device, e, d.hidden,
                     d.intermediate);
  check_scalars(f, a.output2_scale_scalar, "output2_scale_scalar", device, e);
  if (f == Family::kNVFP4BF16Tok) {
    check_operand(a.per_token_scale, "per_token_scale", kFP32, device);
    check_min_numel(a.per_token_scale, "per_token_scale", sizes.max_padded);
  } else {
    check_absent(a.per_token_scale, "per_token_scale", family_rule(f, "has no per-token scales"));
  }
  check_table(a.cta_idx_xy_to_batch_idx, "cta_idx_xy_to_batch_idx", device, sizes.max_ctas);
  check_table(a.cta_idx_xy_to_mn_limit, "cta_idx_xy_to_mn_limit", device, sizes.max_ctas);
  check_scalar(a.num_non_exiting_ctas, "num_non_exiting_ctas", device);
  check_operand(a.gemm2_output, "gemm2_output", {DType::kBF16}, device);
  check_shape(a.gemm2_output, "gemm2_output", {-1, d.hidden});
  require(a.gemm2_output.shape[0] >= sizes.max_padded, "gemm2_output",
          "needs at least max_padded = " + std::to_string(sizes.max_padded) + " rows");
  return d;
}

int64_t validate_finalize(const FinalizeArgs& a) {
  core::check_given({{a.gemm2_output, "gemm2_output"},
                     {a.expert_weights, "expert_weights"},
                     {a.expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx"},
                     {a.total_num_padded_tokens, "total_num_padded_tokens"},
                     {a.output, "output"}});
  check_defined(a.gemm2_output, "gemm2_output");
  const Device device = a.gemm2_output.device;
  check_operand(a.gemm2_output, "gemm2_output", {DType::kBF16}, device);
  check_shape(a.gemm2_output, "gemm2_output", {-1, -1});
  const int64_t h = a.gemm2_output.shape[1];
  check_operand(a.expert_weights, "expert_weights", {DType::kBF16, DType::kFP32}, device);
  check_shape(a.expert_weights, "expert_weights", {-1, -1});
  const int64_t t = a.expert_weights.shape[0], k = a.expert_weights.shape[1];
  require(t > 0 && k > 0, "expert_weights", "needs T > 0 tokens and K > 0 routes");
  check_num_tokens(t, "expert_weights");
  require_in_range(k, 1, kMaxTopK, "expert_weights", "top_k (dimension 1)");
  check_operand(a.expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx", kInt32, device);
  check_min_numel(a.expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx",
                  checked_mul(t, k, "expert_weights", "T * K"));
  check_scalar(a.total_num_padded_tokens, "total_num_padded_tokens", device);
  check_operand(a.output, "output", {DType::kBF16}, device);
  check_shape(a.output, "output", {t, h});
  require_in_range(a.num_experts, 1, kMaxNumExperts, "num_experts", "num_experts");
  return h;
}

}  // namespace stepfun
}  // namespace cakemoe
