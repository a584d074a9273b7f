// Plan selection (spec §8): the native tile window on the dense ladder, filtered by the catalog.
#include <algorithm>
#include <optional>
#include <ostream>
#include <string>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/check.h"
#include "core/checked.h"
#include "stepfun/catalog.h"
#include "stepfun/sm90/tile_config.h"
#include "stepfun/validate.h"

namespace cakemoe {
namespace stepfun {
namespace {

void validate_problem(const ProblemDesc& p) {
  check_family(p.family);
  core::require(p.num_tokens > 0, "num_tokens", "must be > 0");
  core::require_in_range(p.num_tokens, 1, kMaxNumTokens, "num_tokens", "num_tokens");
  core::require(p.top_k > 0, "top_k", "must be > 0");
  core::require_in_range(p.top_k, 1, kMaxTopK, "top_k", "top_k");
  core::require(p.local_num_experts > 0, "local_num_experts", "must be > 0");
  core::require_in_range(p.local_num_experts, 1, kMaxNumExperts, "local_num_experts",
                         "local_num_experts");
  core::require(p.hidden_size > 0, "hidden_size", "must be > 0");
  core::require_in_range(p.hidden_size, 1, kMaxHiddenSize, "hidden_size", "hidden_size");
  core::require(p.intermediate_size > 0 && p.intermediate_size % 64 == 0, "intermediate_size",
                "must be a positive multiple of 64");
  core::require_in_range(p.intermediate_size, 64, kMaxIntermediateSize, "intermediate_size",
                         "intermediate_size");
}

Plan make_plan(const ProblemDesc& p, int tile, const KernelUnit& fc1, const KernelUnit& fc2,
               Arch arch) {
  Plan plan;
  plan.family = p.family;
  plan.tile = tile;
  plan.path = path_name(fc1.arch);
  plan.fc1_kernel = fc1.name;
  plan.fc2_kernel = fc2.name;
  plan.act_sf_layout = act_sf_layout(tile);
  const KernelUnit* routing = find_unit(Stage::kRouting, p.family, tile, arch);
  const KernelUnit* finalize = find_unit(Stage::kFinalize, p.family, tile, arch);
  plan.routing_variant =
      std::string(routing ? routing->name : "none") + (p.logits_input ? "_logits" : "_topk_ids");
  plan.finalize_variant = finalize ? finalize->name : "none";
  return plan;
}

}  // namespace

std::vector<Plan> plans_for(const ProblemDesc& problem) {
  validate_problem(problem);
  const Arch arch = arch_of(problem.device);
  const std::vector<int>& ladder = tile_ladder();
  // Native rule (computeSelectedTileN): center = clamp(nextPow2(ceil(T*K / E_loc)), ladder).
  const int64_t pairs = core::checked_mul(problem.num_tokens, problem.top_k, "num_tokens", "T * K");
  const int64_t avg = (pairs + problem.local_num_experts - 1) / problem.local_num_experts;
  const int64_t center = std::clamp<int64_t>(core::next_pow2_capped(avg, ladder.back()),
                                             ladder.front(), ladder.back());
  const auto center_it = std::find(ladder.begin(), ladder.end(), static_cast<int>(center));
  const int64_t c = center_it - ladder.begin();
  std::vector<Plan> plans;
  // `sm90_variant`: only the sm90 plan of that variant ("" the main units); null: every plan.
  const auto add_tile = [&](int tile, const char* sm90_variant) {
    // One plan per path both stages have a unit on (sm90 first on SM90, its variants, then the
    // portable one).
    for (const KernelUnit* fc1 : find_units(Stage::kFc1, problem.family, tile, arch)) {
      for (const KernelUnit* fc2 : find_units(Stage::kFc2, problem.family, tile, arch)) {
        if (fc1->arch != fc2->arch || fc1->variant != fc2->variant) continue;
        if (sm90_variant && (fc1->arch != Arch::kSm90 || fc1->variant != sm90_variant)) continue;
        if (fc1->arch == Arch::kSm90 && !sm90::sm90_variant_offered(fc1->variant)) continue;
        if (!unit_takes_shape(*fc1, problem.family, problem.hidden_size)) continue;
        plans.push_back(make_plan(problem, tile, *fc1, *fc2, arch));
      }
    }
  };
  // NOTE: on SM90 the measured sm90 plan (sm90/tile_config.h sm90_choice) comes first: the
  // default.
  if (arch == Arch::kSm90) {
    const sm90::Sm90Choice choice = sm90::sm90_choice(problem.family, avg);
    add_tile(choice.tile, sm90::sm90_variant_name(choice.variant));
  }
  for (int64_t i = c - 1; i <= c + 2; ++i) {  // {prev, center, next, next^2} ∩ ladder
    if (i >= 0 && i < static_cast<int64_t>(ladder.size())) add_tile(ladder[i], nullptr);
  }
  // The preferred sm90 plan may sit in the window too: keep its first place only.
  std::vector<Plan> unique;
  for (const Plan& p : plans) {
    const bool seen = std::any_of(unique.begin(), unique.end(), [&](const Plan& u) {
      return u.tile == p.tile && u.fc1_kernel == p.fc1_kernel;
    });
    if (!seen) unique.push_back(p);
  }
  plans.swap(unique);
  return plans;
}

std::optional<Plan> sm90_variant_plan(const ProblemDesc& problem, int tile,
                                      const std::string& variant) {
  validate_problem(problem);
  const Arch arch = arch_of(problem.device);
  for (const KernelUnit* fc1 : find_units(Stage::kFc1, problem.family, tile, arch)) {
    if (fc1->arch != Arch::kSm90 || fc1->variant != variant) continue;
    if (!unit_takes_shape(*fc1, problem.family, problem.hidden_size)) continue;
    for (const KernelUnit* fc2 : find_units(Stage::kFc2, problem.family, tile, arch)) {
      if (fc2->arch == Arch::kSm90 && fc2->variant == variant) {
        return make_plan(problem, tile, *fc1, *fc2, arch);
      }
    }
  }
  return std::nullopt;
}

Plan default_plan(const ProblemDesc& problem) {
  std::vector<Plan> plans = plans_for(problem);
  if (plans.empty()) {
    throw Unsupported("family", std::string("no kernel units for family ") +
                                    family_name(problem.family) +
                                    " on this device in the tile ladder 8..256 (devices other "
                                    "than SM90 / SM100 / SM103 need a CAKEMOE_PORTABLE_PTX=ON "
                                    "build, the default)");
  }
  return plans.front();
}

std::ostream& operator<<(std::ostream& os, const Plan& plan) {
  return os << "Plan{family=" << family_name(plan.family) << ", tile=" << plan.tile
            << ", path=" << plan.path << ", fc1=" << plan.fc1_kernel << ", fc2=" << plan.fc2_kernel
            << ", act_sf=" << sf_layout_name(plan.act_sf_layout)
            << ", routing=" << plan.routing_variant << ", finalize=" << plan.finalize_variant
            << "}";
}

}  // namespace stepfun
}  // namespace cakemoe
