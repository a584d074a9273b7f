// Kernel unit: the grouped BGMV pipeline (spec bgmv §5) for fp16, ranks 8/16/32/64.
#include "bgmv/grouped_pipeline.cuh"
#include "core/kernel_registry.h"

namespace {
void launch(const cakemoe::bgmv::GroupedParams& params, void* stream) {
  cakemoe::bgmv::grouped::launch_grouped<false>(params, stream);
}
}  // namespace

CAKEMOE_KERNEL_UNIT(bgmv_grouped_fp16, "bgmv", "grouped", "fp16", 0, "portable", &launch)
