// Keyword dicts from Python into the StepFun argument structs (one function per struct).
#pragma once

#include <string>

#include "cakemoe/stepfun.h"
#include "kwargs.h"

namespace cakemoe {
namespace python {

/// "linear" | "r8c4" | "r128c4"; InvalidArgument naming `argument` otherwise.
stepfun::SfLayout parse_sf_layout(const std::string& name, const std::string& argument);

stepfun::RoutingArgs routing_args(Kwargs& kw);
stepfun::Fc1Args fc1_args(Kwargs& kw);
stepfun::RequantArgs requant_args(Kwargs& kw);
stepfun::Fc2Args fc2_args(Kwargs& kw);
stepfun::FinalizeArgs finalize_args(Kwargs& kw);
/// MoeArgs from stepfun_moe's keyword arguments (spec stepfun §9.1).
stepfun::MoeArgs moe_args(Kwargs& kw);

}  // namespace python
}  // namespace cakemoe
