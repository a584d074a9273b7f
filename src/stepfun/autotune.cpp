// The choice side of MoeArgs::autotune: keys, the process-wide cache and the fastest-candidate
// rule. The timer lives in autotune_timing.cpp; the prepare hook in moe.cpp calls autotuned_plan.
#include "stepfun/autotune.h"

#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <string>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/checked.h"
#include "core/cuda_util.h"

namespace cakemoe {
namespace stepfun {
namespace autotune {
namespace {

struct Cache {
  std::mutex mutex;
  std::map<CacheKey, Plan> plans;
};

Cache& cache() {
  static Cache instance;  // never destroyed before its users: function-local static
  return instance;
}

std::atomic<int64_t> g_measurements{0};

}  // namespace

int64_t token_bucket(int64_t num_tokens) {
  core::require(num_tokens >= 1 && num_tokens <= kMaxNumTokens, "num_tokens",
                "must be in [1, 2^20]");
  return core::next_pow2_capped(num_tokens, kMaxNumTokens);  // 2^20: a power of two
}

CacheKey make_key(const ProblemDesc& problem, int capability, int sm_count) {
  CacheKey key;
  key.device_type = problem.device.type;
  key.device_index = problem.device.index;
  key.capability = capability;
  key.sm_count = sm_count;
  key.family = problem.family;
  key.token_bucket = token_bucket(problem.num_tokens);
  key.top_k = problem.top_k;
  key.local_num_experts = problem.local_num_experts;
  key.hidden_size = problem.hidden_size;
  key.intermediate_size = problem.intermediate_size;
  key.logits_input = problem.logits_input;
  return key;
}

CacheKey key_for(const ProblemDesc& problem) {
  if (problem.device.type != DeviceType::kCUDA) return make_key(problem, 0, 0);
  // Two cheap attribute queries: a different GPU behind the same index gets its own entry.
  const int index = problem.device.index;
  return make_key(problem, core::cuda_capability(index), core::cuda_sm_count(index));
}

size_t choose_fastest(const std::vector<Plan>& candidates, const MeasureFn& measure) {
  core::require(!candidates.empty(), "candidates", "must hold at least one plan");
  std::exception_ptr first_error;
  size_t best = candidates.size();
  double best_cost = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    double cost = 0;
    try {
      cost = measure(candidates[i]);
    } catch (const Unsupported&) {
      if (!first_error) first_error = std::current_exception();
      continue;
    }
    // Strictly faster only: a tie keeps the earlier candidate (plans_for's preference order).
    if (best == candidates.size() || cost < best_cost) {
      best = i;
      best_cost = cost;
    }
  }
  if (best == candidates.size()) std::rethrow_exception(first_error);
  return best;
}

std::optional<Plan> cache_lookup(const CacheKey& key) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  const auto it = c.plans.find(key);
  if (it == c.plans.end()) return std::nullopt;
  return it->second;
}

Plan cache_store(const CacheKey& key, const Plan& plan) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.plans.emplace(key, plan).first->second;
}

int64_t measurement_count() { return g_measurements.load(); }

Plan autotuned_plan(const MoeArgs& args, const ProblemDesc& problem) {
  core::require_in_range(args.autotune_reps, 1, 1000, "autotune_reps", "autotune_reps");
  const bool on_gpu = problem.device.type == DeviceType::kCUDA;
  // NOTE: measuring synchronises the stream and allocates every candidate's buffers, which a
  // graph capture cannot hold; say so before anything runs (a hit would be safe, but a capture
  // that works only when the cache is warm is a trap).
  core::require(!on_gpu || !core::cuda_stream_capturing(args.autotune_stream), "autotune",
                "must be off while autotune_stream is being captured into a CUDA graph "
                "(autotune runs and synchronises kernels at prepare time)");
  const CacheKey key = key_for(problem);
  if (std::optional<Plan> hit = cache_lookup(key)) return *hit;

  const std::vector<Plan> candidates = plans_for(problem);
  if (candidates.empty()) return default_plan(problem);  // throws its Unsupported
  const auto measure = [&](const Plan& plan) {
    MoeArgs one = args;
    one.plan = plan;  // an explicit plan: this prepare does not autotune again
    one.autotune = false;
    const StepFunMoeLaunch launch = prepare_stepfun_moe(one);
    ++g_measurements;
    return time_launch_us(launch, problem.device, args.autotune_stream, args.autotune_reps);
  };
  return cache_store(key, candidates[choose_fastest(candidates, measure)]);
}

}  // namespace autotune

size_t autotune_cache_size() {
  autotune::Cache& c = autotune::cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.plans.size();
}

void clear_autotune_cache() {
  autotune::Cache& c = autotune::cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.plans.clear();
}

}  // namespace stepfun
}  // namespace cakemoe
