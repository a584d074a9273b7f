// Opt-in autotune of the layer plan (MoeArgs::autotune): plain C++ choice logic (cache key, token
// bucket, process-wide cache, the fastest-candidate rule with an injected measure) plus the timer
// of one prepared layer (autotune_timing.cpp: CUDA events on a GPU, steady_clock on the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {
namespace autotune {

/// What a measured choice is valid for: one device (its kind, index, compute capability and SM
/// count, so a different GPU at the same index misses) and one shape bucket.
struct CacheKey {
  DeviceType device_type = DeviceType::kCPU;
  int device_index = 0;
  int capability = 0;  ///< major * 10 + minor; 0 on the CPU
  int sm_count = 0;    ///< 0 on the CPU
  Family family = Family::kNVFP4;
  int64_t token_bucket = 0;  ///< T rounded up to a power of two
  int64_t top_k = 0;
  int64_t local_num_experts = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  bool logits_input = true;

  auto tied() const {
    return std::tie(device_type, device_index, capability, sm_count, family, token_bucket, top_k,
                    local_num_experts, hidden_size, intermediate_size, logits_input);
  }
  bool operator<(const CacheKey& o) const { return tied() < o.tied(); }
  bool operator==(const CacheKey& o) const { return tied() == o.tied(); }
};

/// The smallest power of two >= num_tokens (num_tokens >= 1).
int64_t token_bucket(int64_t num_tokens);
/// The key of `problem` on a device with the given capability and SM count (tests pass fakes).
CacheKey make_key(const ProblemDesc& problem, int capability, int sm_count);
/// The key of `problem` on its own device (queries capability and SM count of a CUDA device).
CacheKey key_for(const ProblemDesc& problem);

/// Seconds-like cost of one candidate (lower is faster); throws Unsupported to skip it.
using MeasureFn = std::function<double(const Plan&)>;
/// Index of the fastest candidate: the lowest measure, ties to the earlier one (plans_for's
/// order). Candidates whose measure throws Unsupported are skipped; when all do, the first one's
/// error is rethrown. Other exceptions propagate at once. `candidates` must not be empty.
size_t choose_fastest(const std::vector<Plan>& candidates, const MeasureFn& measure);

/// The process-wide cache (thread-safe). store() keeps the first plan stored for a key (two
/// threads that miss together measure twice; both then use the first result) and returns it.
std::optional<Plan> cache_lookup(const CacheKey& key);
Plan cache_store(const CacheKey& key, const Plan& plan);

/// Candidates measured since the process started (a test hook: a cache hit adds nothing).
int64_t measurement_count();

/// Average time of one launch of `launch` over `reps` launches after one warm-up, in
/// microseconds: CUDA events on `stream` (synchronised) for CUDA devices, steady_clock on the CPU.
double time_launch_us(const StepFunMoeLaunch& launch, Device device, Stream stream, int reps);

/// The plan MoeArgs::autotune picks for `problem` on `args` (a.plan absent, a.autotune set):
/// checks the autotune arguments, then answers from the cache or measures plans_for(problem).
Plan autotuned_plan(const MoeArgs& args, const ProblemDesc& problem);

}  // namespace autotune
}  // namespace stepfun
}  // namespace cakemoe
