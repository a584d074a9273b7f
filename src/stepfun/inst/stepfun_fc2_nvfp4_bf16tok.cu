// Kernel unit: StepFun FC2 (spec §7.1), nvfp4_bf16tok family, any tile, portable SIMT.
#include "core/kernel_registry.h"
#include "stepfun/fc2_kernel.cuh"

namespace sfk = cakemoe::stepfun::gemm_kernels;
using cakemoe::stepfun::Family;

CAKEMOE_KERNEL_UNIT(stepfun_fc2_nvfp4_bf16tok, "stepfun", "fc2", "nvfp4_bf16tok", 0, "portable",
                    &sfk::bind_fc2<Family::kNVFP4BF16Tok>)
