// `cakemoe run`, StepFun part: one layer per family through the public API, checked by the oracle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace tools {

/// Largest --tokens of `cakemoe run` (the largest T of the benchmark tables): bounds the host
/// memory of the data and the oracle.
constexpr int64_t kMaxRunTokens = 16384;

struct RunOptions {
  std::string family = "all";  ///< a family name or "all"
  int64_t tokens = 0;          ///< 0: the geometry's default; else in [1, kMaxRunTokens]
  bool full = false;           ///< FlashInfer geometry (H 4096, I 1536, E 64, K 8, T 512)
  uint64_t seed = 20261004;
  bool gpu = false;  ///< run the layers on CUDA device 0 (the oracle stays on the host)
};

/// Copies every defined tensor of `views` to `device`; the copies are kept alive in `keep`.
void move_views(std::vector<TensorView*> views, Device device, std::vector<Tensor>& keep);

/// A progress line on stderr ("[cakemoe] 12.3 s  <text>"), seconds since the first call.
void progress(const std::string& text);

/// Prints one report line per family; returns true when every layer passes its check.
bool run_stepfun(const RunOptions& options);

}  // namespace tools
}  // namespace cakemoe
