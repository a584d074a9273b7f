// Kernel unit: BGMV specialized shrink + expand (spec bgmv §7), hidden 2688, rank 32, bf16 and
// fp16, expand schedules 0 / 1 / 2.
#include "bgmv/specialized_unit.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_specialized_h2688, "bgmv", "specialized", "", 2688, "portable",
                    &cakemoe::bgmv::dev::launch_specialized<2688>)
