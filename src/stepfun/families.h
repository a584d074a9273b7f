// The five StepFun weight families (spec §4), in the order of the Family enum.
#pragma once

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {

constexpr Family kAllFamilies[] = {Family::kBF16, Family::kFP8, Family::kMXFP8, Family::kNVFP4,
                                   Family::kNVFP4BF16Tok};

}  // namespace stepfun
}  // namespace cakemoe
