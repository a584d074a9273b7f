// Kernel unit: StepFun FC1 (spec §5), nvfp4_bf16tok family, any tile, portable SIMT.
#include "core/kernel_registry.h"
#include "stepfun/fc1_kernel.cuh"

namespace sfk = cakemoe::stepfun::gemm_kernels;
using cakemoe::stepfun::Family;

CAKEMOE_KERNEL_UNIT(stepfun_fc1_nvfp4_bf16tok, "stepfun", "fc1", "nvfp4_bf16tok", 0, "portable",
                    &sfk::bind_fc1<Family::kNVFP4BF16Tok>)
