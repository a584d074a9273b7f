// Kernel unit: BGMV fused decode path (one cooperative shrink + expand launch), rank 8, bf16 and
// fp16.
#include "bgmv/decode_fused_unit.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_decode_fused_r8, "bgmv", "decode_fused", "", 8, "portable",
                    &cakemoe::bgmv::dev::launch_fused_decode_rank<8>)
