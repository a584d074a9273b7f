// The five StepFun weight families (spec §4), in the order of the Family enum, and the range
// checks of the public enums. Below the planner: the reference engine and the stepfun layer use it.
#pragma once

#include <string>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {

constexpr Family kAllFamilies[] = {Family::kBF16, Family::kFP8, Family::kMXFP8, Family::kNVFP4,
                                   Family::kNVFP4BF16Tok};

/// InvalidArgument(arg) unless `family` is one of the Family values (a cast integer may not be).
void check_family(Family family, const std::string& arg = "family");
/// InvalidArgument(arg) unless `layout` is one of the SfLayout values.
void check_sf_layout(SfLayout layout, const std::string& arg);

}  // namespace stepfun
}  // namespace cakemoe
