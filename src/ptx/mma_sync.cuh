// Warp-level tensor-core MMA (mma.sync, sm_80+). PTX ISA "Warp-level Matrix Multiply-Accumulate
// Instructions", fragment layouts "Matrix Fragments for mma.m16n8k16 with floating point type":
// A 16 x 16 row-major (4 words of 2 elements), B 16 x 8 column-major (2 words), C / D 16 x 8 fp32
// (4 floats), all per lane.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace cakemoe {
namespace ptx {

/// D += A * B, m16n8k16, bf16 inputs, fp32 accumulators.
CAKEMOE_DEVICE void mma_sync_m16n8k16_f32_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// D += A * B, m16n8k16, fp16 inputs, fp32 accumulators.
CAKEMOE_DEVICE void mma_sync_m16n8k16_f32_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                              uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace ptx
}  // namespace cakemoe
