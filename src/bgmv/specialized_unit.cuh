// Host side of a specialized kernel unit (spec §7): hidden H, rank 32, both dtypes. Launches the
// specialized shrink, then the specialized expand of the plan's schedule, as a programmatic
// dependent of the shrink when pdl_mode != 0 (as the generic pair does). Included by the
// inst/bgmv_specialized_h*.cu units only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "bgmv/cake_launch.h"
#include "bgmv/expand_launch.cuh"
#include "bgmv/specialized_expand.cuh"
#include "bgmv/specialized_shrink.cuh"
#include "cakemoe/errors.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

template <bool kFp16, int kHidden, int kSchedule, Prewait kPrewait>
void launch_specialized_mode(const CakeParams& p, cudaStream_t stream) {
  using X = SpecializedExpand<kHidden, kSchedule>;
  using Shape = typename X::Shape;
  launch_pdl(cake_expand_kernel<kFp16, Shape, kPrewait, typename X::Lanes>,
             dim3(static_cast<unsigned>(p.T), X::kBlocks), dim3(Shape::kThreads), 0, stream,
             p.pdl_mode != 0, p);
}

/// The generic expand's pre-wait modes (with_prewait_mode): the pair form only for schedules 1
/// and 2 (schedule 0 is the plan's T <= 8 window).
template <bool kFp16, int kHidden, int kSchedule>
void launch_specialized_expand(const CakeParams& p, cudaStream_t stream) {
  with_prewait_mode<(kSchedule >= 1)>(p, [&](auto mode) {
    launch_specialized_mode<kFp16, kHidden, kSchedule, decltype(mode)::value>(p, stream);
  });
}

template <bool kFp16, int kHidden>
void launch_specialized_pair(const CakeParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.P), kSpecializedRank / kRankTile,
                  static_cast<unsigned>(p.splits));
  specialized_shrink_kernel<kFp16, kHidden><<<grid, kShrinkThreads, 0, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  if (p.schedule_id == 0) {
    launch_specialized_expand<kFp16, kHidden, 0>(p, stream);
  } else if (p.schedule_id == 1) {
    launch_specialized_expand<kFp16, kHidden, 1>(p, stream);
  } else {
    launch_specialized_expand<kFp16, kHidden, 2>(p, stream);
  }
}

/// The unit launcher; dtype 0 bf16, 1 fp16. Checks what the compile-time shapes rely on.
template <int kHidden>
void launch_specialized(const CakeParams& p, void* stream) {
  constexpr int kTiles = (kHidden + kShrinkTile - 1) / kShrinkTile;
  if (p.H != kHidden || p.R != kSpecializedRank) {
    throw InvalidArgument(
        "variant", "the specialized unit for hidden_size " + std::to_string(kHidden) +
                       " and rank 32 got H=" + std::to_string(p.H) + ", R=" + std::to_string(p.R));
  }
  if (p.dtype != 0 && p.dtype != 1) {
    throw InvalidArgument("dtype",
                          "BGMV kernels take 0 (bf16) or 1 (fp16), got " + std::to_string(p.dtype));
  }
  if (p.splits < 1 || p.splits > kTiles || (p.splits > 1 && p.P > kMaxSplitPairs)) {
    throw InvalidArgument("shrink_launch",
                          "splits must be 1.." + std::to_string(kTiles) + ", and 1 when P > 128");
  }
  if (p.schedule_id < 0 || p.schedule_id >= kSpecializedSchedules) {
    throw InvalidArgument("schedule_id", "the specialized expand has schedules 0, 1 and 2");
  }
  if (p.order != nullptr) {
    throw InvalidArgument("order_remap", "the specialized variant takes no order remap");
  }
  if (p.P <= 0 || p.T <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == 1) {
    launch_specialized_pair<true, kHidden>(p, s);
  } else {
    launch_specialized_pair<false, kHidden>(p, s);
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
