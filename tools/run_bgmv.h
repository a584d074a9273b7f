// `cakemoe run`, BGMV part: one MoE-LoRA plan through the public API, checked by the oracle.
#pragma once

#include <cstdint>
#include <string>

#include "tools/run_stepfun.h"

namespace cakemoe {
namespace tools {

/// y against the fp64 oracle (spec bgmv §11: atol = rtol = 1e-2 per element, and a relative
/// Frobenius error <= 1e-2). A zero reference (every token without a LoRA) has no relative
/// error: rel_frob is then 0 when y is exactly zero and +inf otherwise, never NaN.
struct YCheck {
  double rel_frob = 0;
  double max_abs = 0;
  double fraction_within = 0;
  bool reference_is_zero = false;
  bool pass = false;
  std::string summary() const;
};
YCheck check_y(const float* y, int64_t row_stride, const double* oracle, int64_t rows,
               int64_t cols);

/// Prints the plan's attributes and its check; returns true when it passes.
bool run_bgmv(const RunOptions& options);

}  // namespace tools
}  // namespace cakemoe
