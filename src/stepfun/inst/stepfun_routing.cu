// Kernel unit: StepFun routing (FromLogits bf16/fp32 and precomputed ids; every T), portable.
#include "core/kernel_registry.h"
#include "stepfun/routing_kernels.cuh"

namespace cakemoe {
namespace stepfun {

void launch_stepfun_routing(const RoutingParams& params, Stream stream) {
  routing_kernels::launch(params, stream);
}

}  // namespace stepfun
}  // namespace cakemoe

CAKEMOE_KERNEL_UNIT(stepfun_routing, "stepfun", "routing", "", 0, "portable",
                    static_cast<cakemoe::stepfun::RoutingLauncher>(
                        &cakemoe::stepfun::launch_stepfun_routing))
