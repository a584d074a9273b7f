// Host side of a Cake shrink kernel unit: picks the (dtype, ring depth) instantiation of one rank
// and launches it (spec §4.1). Included by the inst/bgmv_cake_shrink_r*.cu units only.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>
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

template <bool kFp16, int kRank, ShrinkKind kKind>
void launch_shrink_instance(const CakeParams& p, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  constexpr ShrinkForm kForm = shrink_form(kKind);
  auto kernel = cake_shrink_kernel<kFp16, kRank, kKind>;
  const int smem = shrink_smem_bytes(kForm.ring_stages);
  ensure_smem(kernel, smem, smem_set);
  const dim3 grid(static_cast<unsigned>(p.P), kRank / kForm.rows, static_cast<unsigned>(p.splits));
  kernel<<<grid, kShrinkThreads, smem, stream>>>(p);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

/// The unit launcher: one instance per ShrinkKind (half / quarter blocks: 2x / 4x the CTAs,
/// one split); dtype 0 bf16, 1 fp16.
template <int kRank>
void launch_cake_shrink_rank(const CakeParams& p, void* stream) {
  if (p.R != kRank) throw InvalidArgument("rank", "the shrink unit was built for another rank");
  if (shrink_form_number(p.shrink) < 0) {
    throw Unsupported("shrink_launch",
                      "unknown shrink kind " + std::to_string(static_cast<int>(p.shrink)));
  }
  if (p.splits < 1 || p.splits > kMaxSplits || (p.splits > 1 && p.P > kMaxSplitPairs)) {
    throw InvalidArgument("shrink_launch", "splits must be 1..8, and 1 when P > 128");
  }
  if (shrink_form(p.shrink).rows != kRankTile && p.splits != 1) {
    throw InvalidArgument("shrink_launch", "half and quarter rank blocks take one split");
  }
  if (p.P <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto launch = [&](auto fp16) {
    constexpr bool kFp16 = decltype(fp16)::value;
    switch (p.shrink) {
      case ShrinkKind::kRegistersQuarterBlock:
        return launch_shrink_instance<kFp16, kRank, ShrinkKind::kRegistersQuarterBlock>(p, s);
      case ShrinkKind::kRegistersHalfBlock:
        return launch_shrink_instance<kFp16, kRank, ShrinkKind::kRegistersHalfBlock>(p, s);
      case ShrinkKind::kRegistersOneTile:
        return launch_shrink_instance<kFp16, kRank, ShrinkKind::kRegistersOneTile>(p, s);
      case ShrinkKind::kRegisters:
        return launch_shrink_instance<kFp16, kRank, ShrinkKind::kRegisters>(p, s);
      case ShrinkKind::kRing3Stage:
        return launch_shrink_instance<kFp16, kRank, ShrinkKind::kRing3Stage>(p, s);
      case ShrinkKind::kRing2Stage:
        return launch_shrink_instance<kFp16, kRank, ShrinkKind::kRing2Stage>(p, s);
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
