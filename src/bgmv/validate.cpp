#include "bgmv/validate.h"

#include <limits>

#include "bgmv/cake_launch.h"
#include "core/check.h"
#include "core/checked.h"

namespace cakemoe {
namespace bgmv {
namespace {

using core::require;

std::string indexed(const std::string& name, size_t i) {
  return name + "[" + std::to_string(i) + "]";
}

bool is_half_type(DType d) { return d == DType::kBF16 || d == DType::kFP16; }

}  // namespace

ProblemShape validate_operands(const TensorView& x, const std::vector<TensorView>& lora_a,
                               const std::vector<TensorView>& lora_b,
                               const TensorView& sorted_token_ids, const TensorView& expert_ids,
                               const TensorView& lora_indices, const TensorView& topk_weights,
                               int64_t num_experts, const BgmvOptions& options) {
  // Rule 1: backend.
  require(options.backend == "cake", "backend",
          "prepare_bgmv_moe only supports backend='cake', got '" + options.backend + "'");
  // Rule 2: x present (CPU tensors are served by the reference engine, CUDA by the GPU path).
  core::check_defined(x, "x");
  // Rule 3: slice lists.
  require(!lora_a.empty(), "lora_a_weights", "must hold at least one LoRA slice");
  require(lora_a.size() == lora_b.size(), "lora_b_weights",
          "must hold one tensor per slice of lora_a_weights, got " +
              std::to_string(lora_b.size()) + " for " + std::to_string(lora_a.size()));
  // Rule 4: x is 2-D.
  core::check_ndim(x, "x", 2);
  // Rule 5: LoRA tensors are 4-D and share one dtype.
  for (size_t i = 0; i < lora_a.size(); ++i) {
    core::check_defined(lora_a[i], indexed("lora_a_weights", i));
    core::check_ndim(lora_a[i], indexed("lora_a_weights", i), 4);
    core::check_defined(lora_b[i], indexed("lora_b_weights", i));
    core::check_ndim(lora_b[i], indexed("lora_b_weights", i), 4);
  }
  const DType wdtype = lora_a[0].dtype;
  for (size_t i = 0; i < lora_a.size(); ++i) {
    require(lora_a[i].dtype == wdtype, indexed("lora_a_weights", i),
            "all LoRA tensors must share one dtype");
    require(lora_b[i].dtype == wdtype, indexed("lora_b_weights", i),
            "all LoRA tensors must share one dtype");
  }
  // Rule 6: bf16 / fp16, and x matches.
  require(is_half_type(wdtype), "lora_a_weights",
          "x and the LoRA weights must share one dtype, BF16 or FP16; got weights " +
              std::string(dtype_name(wdtype)));
  require(x.dtype == wdtype, "x",
          "x and the LoRA weights must share one dtype, BF16 or FP16; got x " +
              std::string(dtype_name(x.dtype)) + " and weights " + dtype_name(wdtype));
  // Rule 7: LoRA shapes.
  require(num_experts > 0, "num_experts", "must be positive, got " + std::to_string(num_experts));
  ProblemShape s;
  s.dtype = wdtype;
  s.device = x.device;
  s.num_tokens = x.shape[0];
  s.hidden = x.shape[1];
  s.num_slices = static_cast<int64_t>(lora_a.size());
  s.num_experts = num_experts;
  s.num_loras = lora_a[0].shape[0];
  s.rank = lora_a[0].shape[2];
  require(s.rank > 0, "lora_a_weights[0]", "rank (dim 2) must be positive");
  // NOTE: when every LoRA tensor agrees on dim 1, a different num_experts is the wrong argument.
  bool experts_agree = true;
  for (size_t i = 0; i < lora_a.size(); ++i) {
    experts_agree = experts_agree && lora_a[i].shape[1] == lora_a[0].shape[1] &&
                    lora_b[i].shape[1] == lora_a[0].shape[1];
  }
  require(!experts_agree || lora_a[0].shape[1] == num_experts, "num_experts",
          "must equal dim 1 of every LoRA tensor (" + std::to_string(lora_a[0].shape[1]) +
              "), got num_experts=" + std::to_string(num_experts));
  for (size_t i = 0; i < lora_a.size(); ++i) {
    for (const auto* t : {&lora_a[i], &lora_b[i]}) {
      const std::string name = indexed(t == &lora_a[i] ? "lora_a_weights" : "lora_b_weights", i);
      require(t->shape[0] == s.num_loras, name,
              "num_loras (dim 0) must match across LoRA tensors: expected " +
                  std::to_string(s.num_loras) + ", got " + t->describe());
      require(t->shape[1] == num_experts, name,
              "dim 1 must equal num_experts=" + std::to_string(num_experts) + ", got " +
                  t->describe());
    }
    require(lora_a[i].shape[2] == s.rank && lora_a[i].shape[3] == s.hidden,
            indexed("lora_a_weights", i),
            "shape[2:] must be (rank, hidden_size) = (" + std::to_string(s.rank) + ", " +
                std::to_string(s.hidden) + "), got " + lora_a[i].describe());
    require(lora_b[i].shape[3] == s.rank, indexed("lora_b_weights", i),
            "shape[3] must equal rank=" + std::to_string(s.rank) + ", got " +
                lora_b[i].describe());
  }
  // Rule 8: one feat_out.
  s.feat_out = lora_b[0].shape[2];
  for (size_t i = 1; i < lora_b.size(); ++i) {
    require(lora_b[i].shape[2] == s.feat_out, indexed("lora_b_weights", i),
            "all LoRA-B slices must have the same feat_out: expected " +
                std::to_string(s.feat_out) + ", got " + std::to_string(lora_b[i].shape[2]));
  }
  // Rule 9: routing shapes.
  core::check_defined(sorted_token_ids, "sorted_token_ids");
  require(sorted_token_ids.ndim == 1 && sorted_token_ids.shape[0] > 0, "sorted_token_ids",
          "must be 1-D and non-empty, got " + sorted_token_ids.describe());
  s.num_pairs = sorted_token_ids.shape[0];
  core::check_defined(expert_ids, "expert_ids");
  core::check_shape(expert_ids, "expert_ids", {s.num_pairs});
  core::check_defined(topk_weights, "topk_weights");
  core::check_shape(topk_weights, "topk_weights", {s.num_pairs});
  core::check_defined(lora_indices, "lora_indices");
  core::check_shape(lora_indices, "lora_indices", {s.num_tokens});
  core::check_dtype(topk_weights, "topk_weights", {DType::kFP32});
  // Rule 10: one device, contiguous.
  core::check_contiguous(x, "x");
  for (const auto& named : {std::make_pair("sorted_token_ids", &sorted_token_ids),
                            std::make_pair("expert_ids", &expert_ids),
                            std::make_pair("lora_indices", &lora_indices),
                            std::make_pair("topk_weights", &topk_weights)}) {
    core::check_device(*named.second, named.first, x.device);
    core::check_contiguous(*named.second, named.first);
  }
  for (size_t i = 0; i < lora_a.size(); ++i) {
    core::check_device(lora_a[i], indexed("lora_a_weights", i), x.device);
    core::check_contiguous(lora_a[i], indexed("lora_a_weights", i));
    core::check_device(lora_b[i], indexed("lora_b_weights", i), x.device);
    core::check_contiguous(lora_b[i], indexed("lora_b_weights", i));
  }
  // Rule 11: index dtypes.
  core::check_dtype(sorted_token_ids, "sorted_token_ids", {DType::kInt64});
  core::check_dtype(expert_ids, "expert_ids", {DType::kInt64});
  core::check_dtype(lora_indices, "lora_indices", {DType::kInt64});
  // Bounds of bgmv.h (sizes derived from them stay far inside int64).
  using core::require_in_range;
  require_in_range(s.num_tokens, 0, kMaxNumTokens, "x", "the number of tokens T (dim 0)");
  require_in_range(s.hidden, 1, kMaxHiddenSize, "x", "the hidden size H (dim 1)");
  require_in_range(s.num_slices, 1, kMaxNumSlices, "lora_a_weights", "the number of slices S");
  require_in_range(s.num_loras, 0, kMaxNumLoras, "lora_a_weights[0]", "num_loras L (dim 0)");
  require_in_range(s.num_experts, 1, kMaxNumExperts, "num_experts", "num_experts");
  require_in_range(s.rank, 1, kMaxRank, "lora_a_weights[0]", "the rank R (dim 2)");
  require_in_range(s.feat_out, 1, kMaxFeatOut, "lora_b_weights[0]", "feat_out F (dim 2)");
  require_in_range(s.num_pairs, 1, kMaxNumPairs, "sorted_token_ids", "the number of pairs P");
  return s;
}

void validate_index_ranges(const ProblemShape& s, const TensorView& expert_ids,
                           const TensorView& lora_indices) {
  const int64_t* e = expert_ids.ptr<int64_t>();
  for (int64_t p = 0; p < s.num_pairs; ++p) {
    require(e[p] >= 0 && e[p] < s.num_experts, "expert_ids",
            "every expert id must lie in [0, num_experts=" + std::to_string(s.num_experts) +
                "), got " + std::to_string(e[p]) + " at pair " + std::to_string(p));
  }
  const int64_t* l = lora_indices.ptr<int64_t>();
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    require(l[t] >= -1 && l[t] < s.num_loras, "lora_indices",
            "every LoRA index must lie in [-1, num_loras=" + std::to_string(s.num_loras) +
                "), got " + std::to_string(l[t]) + " at token " + std::to_string(t));
  }
}

void validate_workspaces(const ProblemShape& s, const BgmvOptions& options, bool portable) {
  const TensorView& so = options.shrink_out;
  if (so.defined()) {
    core::check_shape(so, "shrink_out", {s.num_slices, s.num_pairs, s.rank});
    core::check_dtype(so, "shrink_out", {s.dtype});
    core::check_device(so, "shrink_out", s.device);
    core::check_contiguous(so, "shrink_out");
  }
  const TensorView& y = options.y_accum;
  if (y.defined()) {
    core::check_shape(y, "y_accum", {s.num_tokens, s.num_slices * s.feat_out});
    core::check_dtype(y, "y_accum", {DType::kFP32});
    core::check_device(y, "y_accum", s.device);
    require(y.strides[1] == 1 && y.strides[0] >= y.shape[1], "y_accum",
            "must be contiguous along its last dimension with a row stride of at least its "
            "width, got strides (" + std::to_string(y.strides[0]) + ", " +
                std::to_string(y.strides[1]) + ")");
    require(!portable || y.is_contiguous(), "y_accum",
            "must be fully contiguous for the portable fallback path");
  }
}

void validate_portable_limits(const ProblemShape& s) {
  core::require_supported(
      s.num_slices <= kPortableMaxSlices, "lora_a_weights",
      "the portable kernels take at most 8 LoRA slices, got " + std::to_string(s.num_slices));
  core::require_supported(
      s.rank <= kPortableMaxRank, "lora_a_weights",
      "the portable kernels take LoRA rank at most 128, got " + std::to_string(s.rank));
}

void validate_int32_limits(const ProblemShape& s,
                           const std::vector<std::pair<std::string, TensorView>>& tensors,
                           const BgmvOptions& options) {
  constexpr int64_t kMax = core::kInt32Max;
  for (const auto& named : tensors) {
    if (!named.second.defined()) continue;
    core::check_view(named.second, named.first);
    require(named.second.numel() <= kMax, named.first,
            "the kernels index with int32: numel must be at most 2147483647, got " +
                named.second.describe());
  }
  // The defaults prepare would allocate: y_accum [T, S*F] fp32, shrink_out [S, P, R].
  const int64_t width = core::checked_mul(s.num_slices, s.feat_out, "lora_b_weights", "S * F");
  if (!options.y_accum.defined()) {
    const int64_t numel = core::checked_mul(s.num_tokens, width, "lora_b_weights", "T * S * F");
    require(numel <= kMax, "lora_b_weights",
            "the default y_accum [T, S*F] = [" + std::to_string(s.num_tokens) + ", " +
                std::to_string(width) + "] must have at most 2147483647 elements (int32 indexing)");
  } else if (options.y_accum.ndim == 2 && options.y_accum.shape[0] > 0) {
    const TensorView& y = options.y_accum;
    core::check_view(y, "y_accum");
    const int64_t span = core::checked_add(
        core::checked_mul(y.shape[0] - 1, y.strides[0], "y_accum", "(T - 1) * row_stride"),
        y.shape[1], "y_accum", "(T - 1) * row_stride + width");
    require(span <= kMax, "y_accum",
            "the kernels index with int32: (T - 1) * row_stride + width must be at most "
            "2147483647, got " +
                std::to_string(span));
  }
  if (!options.shrink_out.defined()) {
    const int64_t numel =
        core::checked_product({s.num_slices, s.num_pairs, s.rank}, "sorted_token_ids", "S * P * R");
    require(numel <= kMax, "sorted_token_ids",
            "the default shrink_out [S, P, R] = " + std::to_string(numel) +
                " elements must be at most 2147483647 (int32 indexing)");
  }
}

}  // namespace bgmv
}  // namespace cakemoe
