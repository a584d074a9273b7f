// Kernel unit: BGMV fused decode path (one cooperative shrink + expand launch), rank 16, bf16 and
// fp16.
#include "bgmv/decode_fused_unit.cuh"
#include "core/kernel_registry.h"

CAKEMOE_KERNEL_UNIT(bgmv_decode_fused_r16, "bgmv", "decode_fused", "", 16, "portable",
                    &cakemoe::bgmv::dev::launch_fused_decode_rank<16>)
