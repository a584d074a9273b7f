// Kernel unit: StepFun per-token NVFP4 requant (nvfp4_bf16tok; linear, r8c4, r128c4), portable.
#include "core/kernel_registry.h"
#include "stepfun/requant_nvfp4.cuh"

namespace cakemoe {
namespace stepfun {

void launch_stepfun_requant(const RequantParams& params, Stream stream) {
  requant_kernels::launch(params, stream);
}

}  // namespace stepfun
}  // namespace cakemoe

CAKEMOE_KERNEL_UNIT(stepfun_requant, "stepfun", "requant", "", 0, "portable",
                    static_cast<cakemoe::stepfun::RequantLauncher>(
                        &cakemoe::stepfun::launch_stepfun_requant))
