// Text form of PlanOverrides (plan.h) for benchmarks and scripts: "key=value[,key=value...]".
// Internal: the library itself never reads it from the environment.
#pragma once

#include <string>

#include "bgmv/plan.h"

namespace cakemoe {
namespace bgmv {

/// Parses "key=value" pairs separated by commas (empty text: no override). Keys and values:
///   variant=generic|specialized|portable   specialized_schedule=0|1|2
///   shrink=KIND:SPLITS (KIND a shrink_kind_name, e.g. registers:1)
///   generic_schedule=0|1|2   launch_pdl_mode=0|1|2   fused_index=0|1   grouped_stage=0|1|2
///   packed_routes=0|1
/// InvalidArgument("overrides") names the first key or value it cannot read. The planner checks
/// the values against the problem (choose_cake_plan).
PlanOverrides parse_plan_overrides(const std::string& text);
/// The same text back, keys in the order above; "" when nothing is forced.
std::string describe_plan_overrides(const PlanOverrides& overrides);

}  // namespace bgmv
}  // namespace cakemoe
