// Pieces of the StepFun binding shared with the unified-configuration binding.
#pragma once

#include <nanobind/nanobind.h>

#include <vector>

#include "cakemoe/stepfun.h"
#include "kwargs.h"

namespace cakemoe {
namespace python {

/// outputs() of a prepared layer as ViewRefs kept alive by `owner` (the launch's Python object).
nanobind::list moe_outputs(const stepfun::StepFunMoeLaunch& launch, nanobind::handle owner);
/// Owning results as ViewRefs.
nanobind::list owned_outputs(const std::vector<Tensor>& tensors);
/// A weight view as a dict: family, the eight tensors (ViewRef or None), the two global scales.
nanobind::dict weights_dict(const stepfun::StepFunWeights& weights);
nanobind::dict activations_dict(const stepfun::StepFunActivations& activations);

void register_stepfun(nanobind::module_& m);
void register_config(nanobind::module_& m);

}  // namespace python
}  // namespace cakemoe
