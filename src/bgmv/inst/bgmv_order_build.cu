// Kernel unit: the order-remap prologue (spec bgmv §6), dtype independent.
#include "bgmv/order_remap_build.cuh"
#include "core/kernel_registry.h"

namespace {
void launch(const cakemoe::bgmv::OrderBuildParams& params, void* stream) {
  cakemoe::bgmv::grouped::launch_order_build(params, stream);
}
}  // namespace

CAKEMOE_KERNEL_UNIT(bgmv_order_build, "bgmv", "order_build", "", 0, "portable", &launch)
