// Kernel unit: BGMV Cake generic expand (spec bgmv §4.3, §4.4), rank 16, bf16 and fp16.
#include "bgmv/expand_launch.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_cake_expand_r16, "bgmv", "cake_expand", "", 16, "portable",
                    &cakemoe::bgmv::dev::launch_cake_expand_rank<16>)
