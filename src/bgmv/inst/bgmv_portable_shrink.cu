// Kernel unit: BGMV portable fallback shrink (spec bgmv §9), runtime H and R, bf16 and fp16.
#include "bgmv/portable_shrink.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_portable_shrink, "bgmv", "portable_shrink", "", 0, "portable",
                    &cakemoe::bgmv::dev::launch_portable_shrink_unit)
