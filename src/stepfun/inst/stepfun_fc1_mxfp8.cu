// Kernel unit: StepFun FC1 (spec §5), mxfp8 family, any tile, portable SIMT.
#include "core/kernel_registry.h"
#include "stepfun/fc1_kernel.cuh"

namespace sfk = cakemoe::stepfun::gemm_kernels;
using cakemoe::stepfun::Family;

CAKEMOE_KERNEL_UNIT(stepfun_fc1_mxfp8, "stepfun", "fc1", "mxfp8", 0, "portable",
                    &sfk::bind_fc1<Family::kMXFP8>)
