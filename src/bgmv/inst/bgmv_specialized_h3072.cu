// Kernel unit: BGMV specialized shrink + expand (spec bgmv §7), hidden 3072, rank 32, bf16 and
// fp16, expand schedules 0 / 1 / 2.
#include "bgmv/specialized_unit.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_specialized_h3072, "bgmv", "specialized", "", 3072, "portable",
                    &cakemoe::bgmv::dev::launch_specialized<3072>)
