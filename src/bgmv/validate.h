// prepare_bgmv_moe argument validation (spec bgmv §10), split out of prepare.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bgmv/plan.h"
#include "cakemoe/bgmv.h"

namespace cakemoe {
namespace bgmv {

/// Sizes of a validated problem.
struct ProblemShape {
  DType dtype = DType::kBF16;
  Device device;
  int64_t num_tokens = 0;   ///< T
  int64_t hidden = 0;       ///< H
  int64_t rank = 0;         ///< R
  int64_t feat_out = 0;     ///< F
  int64_t num_slices = 0;   ///< S
  int64_t num_loras = 0;    ///< L
  int64_t num_experts = 0;  ///< E
  int64_t num_pairs = 0;    ///< P
};

/// spec §10 rules 1-11 in order; throws InvalidArgument naming the argument and the rule.
ProblemShape validate_operands(const TensorView& x, const std::vector<TensorView>& lora_a,
                               const std::vector<TensorView>& lora_b,
                               const TensorView& sorted_token_ids, const TensorView& expert_ids,
                               const TensorView& lora_indices, const TensorView& topk_weights,
                               int64_t num_experts, const BgmvOptions& options);

/// spec §10 rule 12 (host memory only): expert ids in [0, E), LoRA indices in [-1, L).
void validate_index_ranges(const ProblemShape& shape, const TensorView& expert_ids,
                           const TensorView& lora_indices);

/// spec §10 rule 14: optional shrink_out / y_accum; `portable` demands a contiguous y_accum.
void validate_workspaces(const ProblemShape& shape, const BgmvOptions& options, bool portable);

/// The portable CUDA kernels' limits (at most kPortableMaxSlices slices, rank at most
/// kPortableMaxRank); Unsupported("lora_a_weights") beyond them. Checked before allocation.
void validate_portable_limits(const ProblemShape& shape);

/// Kernel-side int32 indexing limits (spec §10, after rule 15), enforced on every path before
/// any index data is read: each named tensor (structure checked first), the default y_accum and
/// shrink_out when absent, and a given y_accum's (T - 1) * row_stride + width.
void validate_int32_limits(const ProblemShape& shape,
                           const std::vector<std::pair<std::string, TensorView>>& tensors,
                           const BgmvOptions& options);

}  // namespace bgmv
}  // namespace cakemoe
