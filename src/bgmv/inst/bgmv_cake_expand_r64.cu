// Kernel unit: BGMV Cake generic expand (spec bgmv §4.3, §4.4), rank 64, bf16 and fp16.
#include "bgmv/expand_launch.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_cake_expand_r64, "bgmv", "cake_expand", "", 64, "portable",
                    &cakemoe::bgmv::dev::launch_cake_expand_rank<64>)
