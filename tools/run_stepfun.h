// `cakemoe run`, StepFun part: one layer per family through the public API, checked by the oracle.
#pragma once

#include <cstdint>
#include <string>

namespace cakemoe {
namespace tools {

struct RunOptions {
  std::string family = "all";  ///< a family name or "all"
  int64_t tokens = 0;          ///< 0: the geometry's default
  bool full = false;           ///< FlashInfer geometry (H 4096, I 1536, E 64, K 8, T 512)
  uint64_t seed = 20261004;
};

/// Prints one report line per family; returns true when every layer passes its check.
bool run_stepfun(const RunOptions& options);

}  // namespace tools
}  // namespace cakemoe
