// Launchers of the BGMV CUDA kernels (spec bgmv §3.3, §4, §9). Plain C++: the plan runtime
// (src/bgmv/plan_impl.*) fills a params struct at prepare time and calls these from run(); they
// enqueue on `stream` without allocating or synchronising (CUDA-graph capturable) and throw
// cakemoe::CudaError when a launch fails. Arguments are trusted: the caller validated them (§10).
// Builds without CUDA get launchers that throw Unsupported.
#pragma once

#include <cstdint>

#include "cakemoe/bgmv.h"

namespace cakemoe {
namespace bgmv {

/// Operands of one Cake generic launch (shrink or expand). Plain data, passed by value to kernels.
/// Requirements (checked by prepare, not here): R in {8, 16, 32, 64}; H a positive multiple of 8
/// (F == H, one slice); every pointer 16-byte aligned device memory; splits > 1 only with
/// P <= 128 and splits <= min(8, ceil(H / 1024)).
struct CakeParams {
  int dtype = 0;                              ///< 0 bf16, 1 fp16 (x, LoRA weights and shrink_out)
  const void* x = nullptr;                    ///< [T, H]
  const void* lora_a = nullptr;               ///< [L, E, R, H]
  const void* lora_b = nullptr;               ///< [L, E, H, R]
  const int64_t* sorted_token_ids = nullptr;  ///< [P]; outside [0, T) = padding
  const int64_t* expert_ids = nullptr;        ///< [P]
  const int64_t* lora_indices = nullptr;      ///< [T]; -1 = no LoRA
  const float* topk_weights = nullptr;        ///< [P]
  void* shrink_out = nullptr;  ///< [P, R], weight dtype; every row written by the shrink
  float* y = nullptr;          ///< [T, H] FP32 with row stride y_row_stride (elements)
  int64_t y_row_stride = 0;
  /// spec §3.3 route index incl. split partials and counters: route_index_layout(T).total_words
  /// words, zeroed once at prepare and never reset afterwards.
  uint32_t* route_index = nullptr;
  /// Order remap (spec §6): shrink CTA x computes pair order[x]; nullptr = identity.
  const int32_t* order = nullptr;
  int64_t T = 0, H = 0, R = 0, P = 0, L = 0, E = 0;
  /// How the shrink streams x and A (ShrinkKind; half / quarter blocks take one split only).
  ShrinkKind shrink = ShrinkKind::kRing2Stage;
  int splits = 1;  ///< hidden splits of the shrink (spec §4.2), 1..8
  /// expand (R/8 lanes per column): 0 = 64 threads x 64/(R/8) columns, one column lane each;
  /// 1 = 128 threads x 128 columns, R/8 column lanes each; 2 = 128 threads x 128/(R/8) columns,
  /// one column lane each, 8 routes per batch (decode)
  int schedule_id = 0;
  int pdl_mode = 0;  ///< spec §4.4: 0 plain, 1 early trigger, 2 late trigger
};

/// Shrink: grid (P, R/8, splits) x 128 threads (half / quarter blocks: R/4 or R/2 blocks, one
/// split). Writes
/// shrink_out and publishes routes (§3.3).
void launch_cake_shrink(const CakeParams& params, void* stream);
/// Expand: grid (T, ceil(H / cols)). With pdl_mode != 0 it is launched as a programmatic
/// dependent of the preceding shrink on the same stream (launch it right after the shrink).
void launch_cake_expand(const CakeParams& params, void* stream);

constexpr int kPortableMaxSlices = 8;
constexpr int64_t kPortableMaxRank = 128;

/// Operands of the portable fallback (spec §9, cakemoe deviation 3): runtime H, F and R.
/// Requirements: 1 <= S <= 8; 1 <= R <= 128 (any value, not only multiples of 8); H >= 1 and
/// F >= 1 (any value: scalar tails); y fully contiguous [T, S*F]; pointers 2-byte aligned (vector
/// loads are used only where alignment allows).
struct PortableParams {
  int dtype = 0;                                ///< 0 bf16, 1 fp16
  int S = 1;                                    ///< slices
  const void* x = nullptr;                      ///< [T, H]
  const void* lora_a[kPortableMaxSlices] = {};  ///< per slice [L, E, R, H]
  const void* lora_b[kPortableMaxSlices] = {};  ///< per slice [L, E, F, R]
  const int64_t* sorted_token_ids = nullptr;    ///< [P]
  const int64_t* expert_ids = nullptr;          ///< [P]
  const int64_t* lora_indices = nullptr;        ///< [T]
  const float* topk_weights = nullptr;          ///< [P]
  void* shrink_out = nullptr;                   ///< [S, P, R] contiguous, weight dtype
  float* y = nullptr;                           ///< [T, S*F] contiguous
  int64_t T = 0, H = 0, F = 0, R = 0, P = 0, L = 0, E = 0;
  /// 1 (compute capability >= 9.0): the expand is a programmatic dependent of the shrink and
  /// reads its indices and B before it waits for the shrink rows.
  int pdl = 0;
};

/// shrink (which also writes the rows of pairs without a LoRA and zeroes y) + weighted expand
/// (FP32 atomics on y: tokens with three or more routes may differ in the last bits between
/// replays); with no pairs, a memset of y.
void launch_portable(const PortableParams& params, void* stream);

/// Kernel-unit launcher signatures (registry: pipeline "bgmv"; stages "cake_shrink",
/// "cake_expand" with variant "" (both dtypes inside) and size = rank; "portable_shrink",
/// "portable_expand" with variant "" and size 0).
using CakeUnitLaunch = void (*)(const CakeParams&, void* stream);
using PortableUnitLaunch = void (*)(const PortableParams&, void* stream);

}  // namespace bgmv
}  // namespace cakemoe
