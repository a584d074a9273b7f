// Kernel unit: StepFun FC2 (spec §7.1), mxfp8 family, any tile, portable SIMT.
#include "core/kernel_registry.h"
#include "stepfun/fc2_kernel.cuh"

namespace sfk = cakemoe::stepfun::gemm_kernels;
using cakemoe::stepfun::Family;

CAKEMOE_KERNEL_UNIT(stepfun_fc2_mxfp8, "stepfun", "fc2", "mxfp8", 0, "portable",
                    &sfk::bind_fc2<Family::kMXFP8>)
