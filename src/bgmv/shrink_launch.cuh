// Host side of a Cake shrink kernel unit: picks the (dtype, ring depth) instantiation of one rank
// and launches it (spec §4.1). Included by the inst/bgmv_cake_shrink_r*.cu units only.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "bgmv/cake_launch.h"
#include "bgmv/shrink_cake.cuh"
#include "cakemoe/errors.h"
#include "core/cuda_check.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

/// Opts `kernel` in to `bytes` of dynamic shared memory once per device.
/// NOTE: cudaFuncSetAttribute is not a stream operation, so this is legal inside a capture too.
/// Any dynamic size opts in: the 48 KB default covers static + dynamic, so a dynamic size just
/// under it can still need the opt-in (the grouped shrink hit that).
template <typename Kernel>
void ensure_smem(Kernel kernel, int bytes, std::atomic<uint64_t>& devices_done) {
  if (bytes <= 0) return;
  int device = 0;
  CAKEMOE_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit != 0 && (devices_done.load() & bit) != 0) return;
  CAKEMOE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  devices_done.fetch_or(bit);
}

template <bool kFp16, int kRank, int kStages, int kRows = kRankTile>
void launch_shrink_instance(const CakeParams& p, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  auto kernel = cake_shrink_kernel<kFp16, kRank, kStages, kRows>;
  const int smem = shrink_smem_bytes(kStages);
  ensure_smem(kernel, smem, smem_set);
  const dim3 grid(static_cast<unsigned>(p.P), kRank / kRows, static_cast<unsigned>(p.splits));
  kernel<<<grid, kShrinkThreads, smem, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

/// The unit launcher: form 0 = 2-stage ring, form 2 = 3-stage ring, form 3 = registers (4 k
/// tiles per trip), form 4 = registers (1 k tile per trip), forms 5 / 6 = form 3 in 4- / 2-row
/// rank blocks (2x / 4x the CTAs, one split); dtype 0 bf16, 1 fp16.
template <int kRank>
void launch_cake_shrink_rank(const CakeParams& p, void* stream) {
  if (p.R != kRank) throw InvalidArgument("rank", "the shrink unit was built for another rank");
  if (p.form != 0 && p.form != 2 && p.form != 3 && p.form != 4 && p.form != 5 && p.form != 6) {
    throw Unsupported("shrink_launch", "only shrink forms 0, 2, 3, 4, 5 and 6 are built");
  }
  if (p.splits < 1 || p.splits > kMaxSplits || (p.splits > 1 && p.P > kMaxSplitPairs)) {
    throw InvalidArgument("shrink_launch", "splits must be 1..8, and 1 when P > 128");
  }
  if ((p.form == 5 || p.form == 6) && p.splits != 1) {
    throw InvalidArgument("shrink_launch", "forms 5 and 6 (4- and 2-row blocks) take one split");
  }
  if (p.P <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto launch = [&](auto fp16) {
    constexpr bool kFp16 = decltype(fp16)::value;
    if (p.form == 6) {
      launch_shrink_instance<kFp16, kRank, 0, kRankTile / 4>(p, s);
    } else if (p.form == 5) {
      launch_shrink_instance<kFp16, kRank, 0, kRankTile / 2>(p, s);
    } else if (p.form == 4) {
      launch_shrink_instance<kFp16, kRank, -1>(p, s);
    } else if (p.form == 3) {
      launch_shrink_instance<kFp16, kRank, 0>(p, s);
    } else if (p.form == 2) {
      launch_shrink_instance<kFp16, kRank, 3>(p, s);
    } else {
      launch_shrink_instance<kFp16, kRank, 2>(p, s);
    }
  };
  if (p.dtype == 1) {
    launch(std::true_type{});
  } else {
    launch(std::false_type{});
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
