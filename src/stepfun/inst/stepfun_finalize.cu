// Kernel unit: StepFun finalize (bf16 or fp32 expert weights), portable.
#include "core/kernel_registry.h"
#include "stepfun/finalize_kernel.cuh"

namespace cakemoe {
namespace stepfun {

void launch_stepfun_finalize(const FinalizeParams& params, Stream stream) {
  finalize_kernels::launch(params, stream);
}

}  // namespace stepfun
}  // namespace cakemoe

CAKEMOE_KERNEL_UNIT(stepfun_finalize, "stepfun", "finalize", "", 0, "portable",
                    static_cast<cakemoe::stepfun::FinalizeLauncher>(
                        &cakemoe::stepfun::launch_stepfun_finalize))
