// Adapters from the public FC1 / FC2 arguments to the CPU reference engine.
#pragma once

#include "cakemoe/stepfun.h"
#include "stepfun/validate.h"

namespace cakemoe {
namespace stepfun {

/// Runs FC1 of spec §5 on validated CPU arguments.
void cpu_fc1(const Fc1Args& args, const GemmDims& dims);
/// Runs FC2 of spec §7.1 on validated CPU arguments.
void cpu_fc2(const Fc2Args& args, const GemmDims& dims);

}  // namespace stepfun
}  // namespace cakemoe
