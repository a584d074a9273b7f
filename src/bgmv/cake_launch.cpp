// Host dispatch of the BGMV CUDA launchers through the kernel-unit catalog (src/bgmv/inst/).
// Builds without CUDA: every launcher throws Unsupported.
#include "bgmv/cake_launch.h"

#include <string>

#include "cakemoe/errors.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "core/kernel_registry.h"
#endif

namespace cakemoe {
namespace bgmv {

#if defined(CAKEMOE_WITH_CUDA)
namespace {

constexpr int kCakeRanks[] = {8, 16, 32, 64};

core::ErasedLauncher find_unit(const char* stage, int size) {
  // NOTE: every BGMV unit is "portable" (sm_90a/sm_100a/sm_103a), so the sm90 flag is moot.
  const core::KernelUnit* unit = core::find_kernel_unit("bgmv", stage, "", size, false);
  if (unit == nullptr) {
    throw Unsupported("rank", std::string("no compiled BGMV kernel unit for stage ") + stage +
                                  " and size " + std::to_string(size) +
                                  " (check CAKEMOE_KERNELS)");
  }
  return unit->launch;
}

/// The launchers of one Cake stage per rank, looked up once per process (nullptr: not built).
struct CakeUnits {
  CakeUnitLaunch by_rank[4] = {};
  explicit CakeUnits(const char* stage) {
    for (int i = 0; i < 4; ++i) {
      const core::KernelUnit* u = core::find_kernel_unit("bgmv", stage, "", kCakeRanks[i], false);
      if (u != nullptr && u->size == kCakeRanks[i]) {
        by_rank[i] = reinterpret_cast<CakeUnitLaunch>(u->launch);
      }
    }
  }
};

CakeUnitLaunch cake_unit(const CakeUnits& units, const char* stage, int64_t rank) {
  for (int i = 0; i < 4; ++i) {
    if (rank != kCakeRanks[i]) continue;
    if (units.by_rank[i] == nullptr) {
      throw Unsupported("rank", std::string("no compiled BGMV kernel unit for stage ") + stage +
                                    " and rank " + std::to_string(rank) +
                                    " (check CAKEMOE_KERNELS)");
    }
    return units.by_rank[i];
  }
  throw InvalidArgument("rank", "the Cake kernels take rank 8, 16, 32 or 64, got " +
                                    std::to_string(rank));
}

void check_dtype(int dtype) {
  if (dtype != 0 && dtype != 1) {
    throw InvalidArgument("dtype", "BGMV kernels take 0 (bf16) or 1 (fp16), got " +
                                       std::to_string(dtype));
  }
}

}  // namespace

void launch_cake_shrink(const CakeParams& params, void* stream) {
  check_dtype(params.dtype);
  static const CakeUnits units("cake_shrink");
  cake_unit(units, "cake_shrink", params.R)(params, stream);
}

void launch_cake_expand(const CakeParams& params, void* stream) {
  check_dtype(params.dtype);
  static const CakeUnits units("cake_expand");
  cake_unit(units, "cake_expand", params.R)(params, stream);
}

void launch_portable(const PortableParams& params, void* stream) {
  check_dtype(params.dtype);
  if (params.S < 1 || params.S > kPortableMaxSlices) {
    throw InvalidArgument("lora_a_weights", "the portable kernels take 1..8 slices, got " +
                                                std::to_string(params.S));
  }
  if (params.R < 1 || params.R > kPortableMaxRank) {
    throw InvalidArgument("rank", "the portable kernels take rank 1..128, got " +
                                      std::to_string(params.R));
  }
  static const auto shrink = reinterpret_cast<PortableUnitLaunch>(find_unit("portable_shrink", 0));
  static const auto expand = reinterpret_cast<PortableUnitLaunch>(find_unit("portable_expand", 0));
  // spec §2 rule 4: the portable plan writes both outputs whole inside the (captured) sequence:
  // the shrink writes every row (zeros without a LoRA) and zeroes y before the expand's atomics.
  if (params.P == 0) {
    const size_t y_bytes = static_cast<size_t>(params.T * params.S * params.F) * sizeof(float);
    if (y_bytes > 0) {
      CAKEMOE_CUDA_CHECK(
          cudaMemsetAsync(params.y, 0, y_bytes, static_cast<cudaStream_t>(stream)));
    }
    return;
  }
  shrink(params, stream);
  expand(params, stream);
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw Unsupported("device", "this build of cakemoe has no CUDA support (CAKEMOE_WITH_CUDA=OFF)");
}
}  // namespace

void launch_cake_shrink(const CakeParams&, void*) { no_cuda(); }
void launch_cake_expand(const CakeParams&, void*) { no_cuda(); }
void launch_portable(const PortableParams&, void*) { no_cuda(); }

#endif

}  // namespace bgmv
}  // namespace cakemoe
