// `cakemoe run`, BGMV part: one MoE-LoRA plan through the public API, checked by the oracle.
#pragma once

#include "tools/run_stepfun.h"

namespace cakemoe {
namespace tools {

/// Prints the plan's attributes and its check; returns true when it passes.
bool run_bgmv(const RunOptions& options);

}  // namespace tools
}  // namespace cakemoe
