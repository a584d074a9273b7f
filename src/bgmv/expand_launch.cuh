// Host side of a Cake expand kernel unit: picks the (dtype, schedule) instantiation of one rank and
// launches it, as a programmatic dependent of the shrink when pdl_mode != 0 (spec §4.3, §4.4).
// Included by the inst/bgmv_cake_expand_r*.cu units only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "bgmv/cake_launch.h"
#include "bgmv/expand_cake.cuh"
#include "cakemoe/errors.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

template <bool kFp16, class Shape, Prewait kPrewait>
void launch_expand_mode(const CakeParams& p, cudaStream_t stream) {
  launch_pdl(cake_expand_kernel<kFp16, Shape, kPrewait>,
             dim3(static_cast<unsigned>(p.T),
                  static_cast<unsigned>((p.H + Shape::kCols - 1) / Shape::kCols)),
             dim3(Shape::kThreads), 0, stream, p.pdl_mode != 0, p);
}

/// The pre-wait mode of a launch (expand_cake.cuh, enum Prewait): the staged contiguous pair
/// when the route list comes from the route index (P > kScanPairs) and P == 2T.
inline Prewait expand_prewait_mode(const CakeParams& p) {
  return p.P > kScanPairs && p.P == 2 * p.T ? kPrewaitPair : kPrewaitBatch;
}

/// Calls launch(std::integral_constant<Prewait, mode>) with the launch's pre-wait mode;
/// `kWithPair`: whether the caller's shape has a kPrewaitPair instance (shapes only plans at
/// T <= 8 take do not: there P > kScanPairs needs k > 32), else kPrewaitBatch always.
template <bool kWithPair, class Launch>
void with_prewait_mode(const CakeParams& p, Launch&& launch) {
  if constexpr (kWithPair) {
    if (expand_prewait_mode(p) == kPrewaitPair) {
      return launch(std::integral_constant<Prewait, kPrewaitPair>{});
    }
  }
  launch(std::integral_constant<Prewait, kPrewaitBatch>{});
}

template <bool kFp16, class Shape, bool kWithPair>
void launch_expand_instance(const CakeParams& p, cudaStream_t stream) {
  with_prewait_mode<kWithPair>(
      p, [&](auto mode) { launch_expand_mode<kFp16, Shape, decltype(mode)::value>(p, stream); });
}

/// Schedule 0, narrow: 64 threads, one (column, lane) slot each, so 64 / G columns per CTA and
/// 4 routes' loads in flight per thread (small T: many CTAs, short ones; SM90 plans take it at
/// rank 64 with more than two routes per token). 8 routes per trip measured 10-17 % slower at
/// T 4 / 8 (116 registers; bench/results/*_94bfef4_bgmv-decode.md).
/// Schedule 1, wide: 128 threads x 128 columns, G slots per thread, 8 B vectors in flight per
/// thread (route discovery amortised over 128 columns).
/// Schedule 2, decode: 128 threads, one (column, lane) slot each (128 / G columns per CTA) and 8
/// routes per batch, so up to 8 routes' B are in registers before the wait and the shrink rows
/// are one trip after it (116 registers; where SM90 plans take it: plan_generic_schedule).
template <bool kFp16, int kRank>
void launch_expand_schedule(const CakeParams& p, cudaStream_t stream) {
  if (p.schedule_id == 1) {
    launch_expand_instance<kFp16, WideExpand<kRank>, true>(p, stream);
  } else if (p.schedule_id == 2) {
    launch_expand_instance<kFp16, DecodeExpand<kRank>, false>(p, stream);
  } else {
    launch_expand_instance<kFp16, NarrowExpand<kRank>, false>(p, stream);
  }
}

/// The unit launcher: schedule 0 narrow, 1 wide, 2 decode (above); dtype 0 bf16, 1 fp16.
template <int kRank>
void launch_cake_expand_rank(const CakeParams& p, void* stream) {
  if (p.R != kRank) throw InvalidArgument("rank", "the expand unit was built for another rank");
  if (p.schedule_id < 0 || p.schedule_id > 2) {
    throw Unsupported("schedule_id", "the generic expand has schedules 0, 1 and 2");
  }
  if (p.T <= 0 || p.H <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == 1) {
    launch_expand_schedule<true, kRank>(p, s);
  } else {
    launch_expand_schedule<false, kRank>(p, s);
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
