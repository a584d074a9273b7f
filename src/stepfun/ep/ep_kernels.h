// Device work of the StepFun EP layer around the NCCL calls: routing bookkeeping (route), row
// gathers into the send buffers (pack), masking of unsent rows (mask), id unpacking and the
// fixed-order combine. Params are PODs filled on the host; the launchers (ep_kernels.cu) only
// enqueue. Host mirrors of each rule: dispatch_plan.h.
#pragma once

#include <cstdint>

#include "cakemoe/tensor.h"
#include "stepfun/ep/dispatch_plan.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

/// plan_dispatch on the device: one CTA per destination rank.
struct RouteParams {
  const int32_t* topk_ids = nullptr;         ///< [T, K] global expert ids
  const int32_t* owner_of_expert = nullptr;  ///< [E] rank of each expert
  int32_t num_tokens = 0;
  int32_t top_k = 0;
  int32_t num_experts = 0;
  int32_t world_size = 0;
  int32_t rows_per_peer = 0;
  int32_t* send_counts = nullptr;        ///< [world]
  int32_t* slot_of = nullptr;            ///< [T, world]
  int32_t* token_of_send_row = nullptr;  ///< [world, rows_per_peer]; rows >= count unwritten
};

/// One field of pack: row r of `dst` <- row token_of_send_row[r] of `src`.
struct PackField {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  int64_t row_bytes = 0;
  int32_t word_bytes = 1;  ///< 16, 4 or 1: the widest access both pointers and rows allow
};

/// pack_rows_host on the device: grid (rows_per_peer, regions).
struct PackParams {
  PackField fields[kNumFields];
  int32_t num_fields = 0;
  const int32_t* token_of_send_row = nullptr;  ///< [regions, rows_per_peer]
  const int32_t* send_counts = nullptr;        ///< [regions]: rows used per region
  int32_t regions = 0;
  int32_t rows_per_peer = 0;
};

/// mask_received_ids_host on the device.
struct MaskParams {
  int32_t* recv_ids = nullptr;           ///< [world, rows_per_peer, K]
  const int32_t* recv_counts = nullptr;  ///< [world]
  int32_t world_size = 0;
  int32_t rows_per_peer = 0;
  int32_t top_k = 0;
};

/// ids[i] = topk_packed[i] >> 16 (the router's packed id << 16 | bf16 weight, spec §2.2).
struct UnpackIdsParams {
  const int32_t* topk_packed = nullptr;
  int32_t* topk_ids = nullptr;
  int64_t count = 0;
};

/// combine_host on the device: one CTA per token.
struct CombineParams {
  const uint16_t* partials = nullptr;  ///< bf16 [world, rows_per_peer, H]
  const int32_t* slot_of = nullptr;    ///< [T, world]
  uint16_t* output = nullptr;          ///< bf16 [T, H]
  int32_t num_tokens = 0;
  int32_t world_size = 0;
  int32_t rows_per_peer = 0;
  int64_t hidden = 0;
  bool vector_access = false;  ///< H % 8 == 0 and both pointers 16-byte aligned
};

/// Widest access (16, 4 or 1 bytes) that rows of `row_bytes` at `a` and `b` allow.
int32_t widest_word(const void* a, const void* b, int64_t row_bytes);

void launch_route(const RouteParams& params, Stream stream);
void launch_pack(const PackParams& params, Stream stream);
void launch_mask(const MaskParams& params, Stream stream);
void launch_unpack_ids(const UnpackIdsParams& params, Stream stream);
void launch_combine(const CombineParams& params, Stream stream);

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
