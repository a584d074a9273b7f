// Limits and small helpers shared by the BGMV planner's sources (plan_*.cpp; spec bgmv §4.1,
// §4.3, §5). Internal to the planner: every other reader goes through plan.h.
#pragma once

#include <cstdint>

#include "core/checked.h"

namespace cakemoe {
namespace bgmv {

// spec §4.1 shrink geometry.
constexpr int64_t kRankTile = 8;
constexpr int64_t kSplitMax = 8;
constexpr int64_t kSplitMaxPairs = 128;
// Generic expand schedule 2 (decode): 128 threads, one (column, lane) slot each, 8 routes a batch.
constexpr int kScheduleDecode = 2;

// spec §5 grouped pipeline.
constexpr int64_t kGroupBinsMax = 4096;
constexpr int64_t kGroupedMaxTileRows = 65536;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline bool is_generic_rank(int64_t rank) {
  return rank == 8 || rank == 16 || rank == 32 || rank == 64;
}

/// L * E (lora, expert) bins.
inline int64_t num_bins(int64_t num_loras, int64_t num_experts) {
  return core::checked_mul(num_loras, num_experts, "num_loras", "num_loras * num_experts");
}

}  // namespace bgmv
}  // namespace cakemoe
