// The StepFun EP entries of `cakemoe._cakemoe` (python/src/stepfun_ep_binding.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace cakemoe {
namespace python {

void register_stepfun_ep(nanobind::module_& m);

}  // namespace python
}  // namespace cakemoe
