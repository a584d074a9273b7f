// Kernel unit: StepFun FC2 (spec §7.1), nvfp4 family, any tile, portable SIMT.
#include "core/kernel_registry.h"
#include "stepfun/fc2_kernel.cuh"

CAKEMOE_KERNEL_UNIT(stepfun_fc2_nvfp4, "stepfun", "fc2", "nvfp4", 0, "portable",
                    &cakemoe::stepfun::gpu::launch_fc2<cakemoe::stepfun::Family::kNVFP4>)
