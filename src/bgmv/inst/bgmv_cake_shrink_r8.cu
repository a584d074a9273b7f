// Kernel unit: BGMV Cake generic shrink (spec bgmv §4.1, §4.2), rank 8, bf16 and fp16.
#include "bgmv/shrink_launch.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_cake_shrink_r8, "bgmv", "cake_shrink", "", 8, "portable",
                    &cakemoe::bgmv::dev::launch_cake_shrink_rank<8>)
