// Kernel unit: BGMV portable fallback expand (spec bgmv §9), runtime F and R, bf16 and fp16.
#include "bgmv/portable_expand.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_portable_expand, "bgmv", "portable_expand", "", 0, "portable",
                    &cakemoe::bgmv::dev::launch_portable_expand_unit)
