// The route index of spec §3.3 on the device: word offsets (equal to bgmv::route_index_layout,
// checked by the GPU tests) and the publish / discover / epilogue steps of the protocol.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/macros.h"

namespace cakemoe {
namespace bgmv {
namespace dev {

constexpr int kSlotsPerToken = 16;
constexpr int kMaxSplits = 8;
constexpr int kMaxSplitPairs = 128;
constexpr int kMaxSplitRank = 64;
/// Routes a token can hold in the index path: 16 slots plus the implicit positions 2t, 2t+1.
constexpr int kMaxIndexedRoutes = kSlotsPerToken + 2;

/// Views of the route index words of one plan (T tokens).
struct RouteIndex {
  uint32_t* words;
  int64_t tokens;

  CAKEMOE_DEVICE uint32_t* launch_counter() const { return words; }
  CAKEMOE_DEVICE uint32_t* parity() const { return words + 1; }
  CAKEMOE_DEVICE uint32_t* count(int64_t t) const { return words + 4 + t; }
  CAKEMOE_DEVICE uint32_t* base(int64_t t, uint32_t parity) const {
    return words + 4 + (1 + parity) * tokens + t;
  }
  CAKEMOE_DEVICE uint32_t* slots(int64_t t) const {
    return words + 4 + 3 * tokens + kSlotsPerToken * t;
  }
  /// FP32 split partials [8][128][64], indexed (z * P + p) * R + r (spec §4.2).
  CAKEMOE_DEVICE float* split_partials() const {
    return reinterpret_cast<float*>(words + 4 + 19 * tokens);
  }
  /// Split tickets [128][8], indexed p * (R / 8) + rank_block.
  CAKEMOE_DEVICE uint32_t* split_counters() const {
    return words + 4 + 19 * tokens + kMaxSplits * kMaxSplitPairs * kMaxSplitRank;
  }
};

/// Coherent (L2) loads of words another grid or CTA wrote.
CAKEMOE_DEVICE uint32_t load_word(const uint32_t* p) { return __ldcg(p); }

/// True when pair p of token t sits where a contiguous top-2 layout puts it (P == 2T and
/// p - 2t in {0, 1}): such pairs are never published, the expand checks 2t and 2t+1 itself.
CAKEMOE_DEVICE bool implicit_pair(int64_t p, int64_t t, int64_t pairs, int64_t tokens) {
  return pairs == 2 * tokens && (p == 2 * t || p == 2 * t + 1);
}

/// Shrink side, step 1 (one thread per valid, non-implicit pair, at CTA entry).
struct PublishTicket {
  uint32_t launch;
  uint32_t old_count;
  uint32_t base_even;
  uint32_t base_odd;
};

CAKEMOE_DEVICE PublishTicket publish_begin(const RouteIndex& ri, int64_t t) {
  PublishTicket k;
  k.launch = load_word(ri.launch_counter());
  k.old_count = atomicAdd(ri.count(t), 1u);
  k.base_even = load_word(ri.base(t, 0));
  k.base_odd = load_word(ri.base(t, 1));
  return k;
}

/// Shrink side, step 2 (after the compute): store p into the token's slot when it fits.
CAKEMOE_DEVICE void publish_end(const RouteIndex& ri, const PublishTicket& k, int64_t t,
                                int64_t p) {
  const uint32_t base = (k.launch & 1u) ? k.base_odd : k.base_even;
  const uint32_t slot = k.old_count - base;  // NOTE: uint32 wrap is harmless (spec §3.3)
  if (slot < static_cast<uint32_t>(kSlotsPerToken)) {
    ri.slots(t)[slot] = static_cast<uint32_t>(p);
  }
}

}  // namespace dev
}  // namespace bgmv
}  // namespace cakemoe
