// Specialized BGMV expand (spec §7, §4.3): the token-owned, lane-cooperative expand of
// expand_cake.cuh with hidden H and rank 32 fixed at compile time, in the three specialized
// schedules (0: 64, 1: 128, 2: 256 columns per CTA). It is the generic body instantiated with
// SpecializedLanes, so route discovery, the canonical per-route order (spec §3.2), the §3.3
// epilogue and PDL are the generic ones and the bits are the same; what changes is that column
// bounds and B offsets use the constant H (no bounds checks where H is a multiple of the CTA's
// columns) and the CTA shapes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bgmv/cake_device.cuh"
#include "bgmv/expand_cake.cuh"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kSpecializedSchedules = 3;

/// CTA shape of a specialized schedule at rank 32 (G = 4 lanes per column): kThreads threads,
/// kItems (column, lane) slots each, kBatch routes' B vectors loaded before their FMAs.
template <int kSchedule>
struct SpecializedSchedule;
/// token_owned_t64: 64 columns per CTA, 8 B vectors in flight per thread (4 routes x 2 columns).
template <>
struct SpecializedSchedule<0> {
  static constexpr int kThreads = 128, kItems = 2, kBatch = 4;
};
/// token_owned: 128 columns per CTA (the generic wide shape).
template <>
struct SpecializedSchedule<1> {
  static constexpr int kThreads = 128, kItems = 4, kBatch = 2;
};
/// token_owned_dual_col: 256 columns per CTA, two columns' worth of slots per thread (8 items),
/// so route discovery is paid once per 256 columns.
template <>
struct SpecializedSchedule<2> {
  static constexpr int kThreads = 128, kItems = 8, kBatch = 2;
};

/// ExpandLanes with H a compile-time constant: `in` is constant true when the CTA's columns
/// divide H (every shape but H 2688 with 256 columns).
template <class Shape, int kHidden>
struct SpecializedLanes {
  static constexpr int64_t H = kHidden;
  int g;         // rank group of this lane
  int64_t col0;  // column of item 0; item i is col0 + i * Shape::kColStride

  static CAKEMOE_DEVICE SpecializedLanes make(int g, int64_t col0, int64_t /*hidden*/) {
    return SpecializedLanes{g, col0};
  }
  CAKEMOE_DEVICE int64_t col(int i) const { return col0 + i * Shape::kColStride; }
  CAKEMOE_DEVICE bool in(int i) const { return kHidden % Shape::kCols == 0 || col(i) < kHidden; }
};

template <int kHidden, int kSchedule>
struct SpecializedExpand {
  using Sched = SpecializedSchedule<kSchedule>;
  using Shape = ExpandShape<32, Sched::kThreads, Sched::kItems, Sched::kBatch>;
  using Lanes = SpecializedLanes<Shape, kHidden>;
  static constexpr int kCols = Shape::kCols;
  static constexpr int kBlocks = (kHidden + kCols - 1) / kCols;  // column blocks per token
  static_assert(kCols == (64 << kSchedule), "schedule s has 64 * 2^s columns per CTA");
};

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
