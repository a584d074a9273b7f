// StepFun finalize (spec stepfun §7.2), bitwise equal to reference::stepfun::finalize:
// out[t, h] = bf16_rn(acc), acc = fmaf(w[t,k], g2[p, h], acc) over k in order from +0, p == -1
// skipped. One thread owns kVec consecutive h of a token; vector loads keep the per-element order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/launch_pdl.h"
#include "core/macros.h"
#include "formats/codecs.h"
#include "ptx/sync.cuh"
#include "stepfun/routing_params.h"

namespace cakemoe {
namespace stepfun {
namespace finalize_kernels {

constexpr int kThreads = 128;
constexpr int kMaxGridY = 65535;

/// kVec bf16 of a row: the raw bits (loaded first, so the top-k loads are in flight together),
/// then widened to fp32 and rounded back.
template <int kVec>
struct Bf16Vec;

template <>
struct Bf16Vec<1> {
  using Raw = uint16_t;
  CAKEMOE_DEVICE static Raw load(const uint16_t* src) { return *src; }
  CAKEMOE_DEVICE static void widen(Raw raw, float* out) { out[0] = formats::bf16_to_float(raw); }
  CAKEMOE_DEVICE static void store(const float* in, uint16_t* dst) {
    *dst = formats::bf16_from_float(in[0]);
  }
};

template <>
struct Bf16Vec<8> {
  using Raw = uint4;
  CAKEMOE_DEVICE static Raw load(const uint16_t* src) {
    return *reinterpret_cast<const uint4*>(src);
  }
  CAKEMOE_DEVICE static void widen(Raw raw, float* out) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    for (int q = 0; q < 4; ++q) {
      out[2 * q] = formats::bf16_to_float(static_cast<uint16_t>(w[q] & 0xFFFFu));
      out[2 * q + 1] = formats::bf16_to_float(static_cast<uint16_t>(w[q] >> 16));
    }
  }
  CAKEMOE_DEVICE static void store(const float* in, uint16_t* dst) {
    uint32_t w[4];
    for (int q = 0; q < 4; ++q) {
      w[q] = formats::bf16_from_float(in[2 * q]) |
             (static_cast<uint32_t>(formats::bf16_from_float(in[2 * q + 1])) << 16);
    }
    *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
  }
};

/// Top-k terms whose loads a thread issues before it accumulates them.
constexpr int kTermsInFlight = 8;

template <int kVec>
__global__ void __launch_bounds__(kThreads) finalize_kernel(const FinalizeParams p) {
  ptx::griddep_enter();  // PDL: core/launch_pdl.h
  using Vec = Bf16Vec<kVec>;
  const int64_t h0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (h0 >= p.hidden) return;
  for (int64_t t = blockIdx.y; t < p.num_tokens; t += gridDim.y) {
    float acc[kVec];
    for (int v = 0; v < kVec; ++v) acc[v] = 0.0f;
    for (int64_t k0 = 0; k0 < p.top_k; k0 += kTermsInFlight) {
      // Loads first: slots and weights, then the rows of the valid slots (a chain of dependent
      // loads per term otherwise: 2 * K round trips at decode).
      int32_t slot[kTermsInFlight];
      float w[kTermsInFlight];
      typename Vec::Raw raw[kTermsInFlight];
#pragma unroll
      for (int j = 0; j < kTermsInFlight; ++j) {
        const int64_t i = t * p.top_k + k0 + j;
        slot[j] = -1;
        w[j] = 0.0f;
        if (k0 + j < p.top_k) {
          // NOTE: -1 is "not routed here"; other out-of-range slots (rejected by the CPU
          // reference) are skipped too: a kernel has no error path.
          const int32_t s = __ldg(p.expanded_idx_to_permuted_idx + i);
          slot[j] = s < 0 || s >= p.gemm2_rows ? -1 : s;
          w[j] = p.weights_fp32 ? __ldg(static_cast<const float*>(p.expert_weights) + i)
                                : formats::bf16_to_float(__ldg(
                                      static_cast<const unsigned short*>(p.expert_weights) + i));
        }
      }
#pragma unroll
      for (int j = 0; j < kTermsInFlight; ++j) {
        if (slot[j] >= 0) raw[j] = Vec::load(p.gemm2_output + int64_t{slot[j]} * p.hidden + h0);
      }
#pragma unroll
      for (int j = 0; j < kTermsInFlight; ++j) {
        if (slot[j] < 0) continue;
        float g[kVec];
        Vec::widen(raw[j], g);
        // NOTE: spec §7.2 "fused multiply-add allowed" = exactly one fmaf per term, k ascending.
        for (int v = 0; v < kVec; ++v) acc[v] = fmaf(w[j], g[v], acc[v]);
      }
    }
    Vec::store(acc, p.output + t * p.hidden + h0);
  }
}

/// Enqueues the finalize of `p` on `stream`; 16-byte accesses when H % 8 == 0 and aligned.
inline void launch(const FinalizeParams& p, Stream stream) {
  if (p.num_tokens == 0 || p.hidden == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool vec = p.hidden % 8 == 0 && reinterpret_cast<uintptr_t>(p.gemm2_output) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.output) % 16 == 0;
  const int vec_width = vec ? 8 : 1;
  const int64_t per_block = static_cast<int64_t>(kThreads) * vec_width;
  const dim3 grid(static_cast<unsigned>((p.hidden + per_block - 1) / per_block),
                  static_cast<unsigned>(p.num_tokens < kMaxGridY ? p.num_tokens : kMaxGridY));
  if (vec) {
    core::launch_dependent(finalize_kernel<8>, grid, dim3(kThreads), 0, s, p);
  } else {
    core::launch_dependent(finalize_kernel<1>, grid, dim3(kThreads), 0, s, p);
  }
}

}  // namespace finalize_kernels
}  // namespace stepfun
}  // namespace cakemoe
