// Operands of the fused decode path (src/bgmv/decode_fused.cuh): the Cake shrink and expand of
// tiny batches in ONE cooperative launch. Plain C++ (no CUDA types); the plan fills it at prepare
// and the kernel unit inst/bgmv_decode_fused_r<R>.cu launches it from run().
#pragma once

#include <cstdint>

#include "bgmv/cake_launch.h"

namespace cakemoe {
namespace bgmv {

/// Threads of every CTA of the fused kernel (shrink and expand roles alike).
constexpr int kFusedThreads = 128;
/// Output columns of one expand CTA (one thread per column, spec §4.3 token-owned).
constexpr int64_t kFusedCols = 128;
/// Hard limit on P: one expand thread per pair scans sorted_token_ids in one step, and the
/// split-partial region of the route index holds 128 pairs (spec §3.3).
constexpr int64_t kFusedMaxPairs = 128;

/// Launch operands. Grid: shrink_ctas + expand_ctas CTAs of kFusedThreads, cooperative (all
/// co-resident; the plan checks the grid against the occupancy at prepare).
/// - CTA b < shrink_ctas: shrink of pair b / (R/8 * splits), rank block (b / splits) % (R/8),
///   split b % splits; FP32 partial into the route index's split-partial region.
/// - CTA b >= shrink_ctas: expand of token (b - shrink_ctas) / ceil(H / 128), column block
///   (b - shrink_ctas) % ceil(H / 128), after all shrink CTAs arrived.
struct FusedDecodeParams {
  /// Operands (bound tensors, route index, splits); form, schedule_id, pdl_mode and order are
  /// unused. Requirements as CakeParams, plus P <= kFusedMaxPairs.
  CakeParams cake;
  int64_t shrink_ctas = 0;  ///< P * (R / 8) * splits
  int64_t expand_ctas = 0;  ///< T * ceil(H / 128)
  /// Query mode: when set, the launcher writes the kernel's maximum active CTAs per SM on device
  /// `query_device` (cudaOccupancyMaxActiveBlocksPerMultiprocessor) and launches nothing.
  int* blocks_per_sm_out = nullptr;
  int query_device = 0;
};

/// Kernel-unit launcher (registry: pipeline "bgmv", stage "decode_fused", variant "", size =
/// rank; both dtypes inside). Enqueues one cooperative launch on `stream` (capturable).
using FusedDecodeLauncher = void (*)(const FusedDecodeParams&, void* stream);

}  // namespace bgmv
}  // namespace cakemoe
