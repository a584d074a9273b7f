// Inputs of bench_stepfun_layer: a family's physical weights filled with random valid codes on the
// device (never a logical bf16 copy on the host), the seeded routing logits that
// bench/anchor_grouped_mm.py reproduces bit for bit, their top-k on the host, and the family's
// activations quantized by prepare_activations on the host.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"
#include "core/parallel.h"
#include "formats/codecs.h"
#include "formats/layouts.h"

namespace cakemoe {
namespace stepfun {
namespace layer_bench {

struct Workload {
  const char* name;
  int64_t hidden, inter, experts, top_k;  // H, I, E (all local), K
};
constexpr Workload kWorkloads[] = {{"step35", 4096, 1280, 288, 8}, {"fi", 4096, 1536, 64, 8}};

constexpr uint64_t kLogitSeed = 0x5EED;   // routing logits (shared with anchor_grouped_mm.py)
constexpr uint64_t kHiddenSeed = 0xD1CE;  // hidden states
constexpr float kHiddenAmax = 12.f;       // hidden = 12 * u: a_gs calibrated to this bound
constexpr float kScalar = 1e-2f;          // output1 / output1_gate / output2 scalars
constexpr float kStepLimit = 7.f;         // SwiGLUStep limit L in real units

/// splitmix64 of (seed << 32) + i, its top 24 bits mapped to [-1, 1): exact in fp32. The anchor
/// (anchor_grouped_mm.py, logits()) computes the same bits; change both or neither.
inline float hash_uniform(uint64_t seed, uint64_t i) {
  uint64_t z = (seed << 32) + i + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 40) * 0x1.0p-24 * 2.0 - 1.0);
}

// ---- Routing ------------------------------------------------------------------------------------

/// Logits [T, E] (logit(t, e) = hash_uniform(kLogitSeed, t * E + e)) and their host top-k: rows
/// of a larger T extend those of a smaller one.
struct Routing {
  std::vector<float> logits;   // [T, E]
  std::vector<int32_t> topk;   // [T, K], descending logits, ties to the smaller expert id
  int64_t unique_experts = 0;  // experts with at least one token
  int64_t checksum = 0;        // sum of id * (i % 997 + 1): compared with the anchor's
};

inline Routing make_routing(const Workload& w, int64_t tokens) {
  Routing r;
  const int64_t e = w.experts, k = w.top_k;
  r.logits.resize(static_cast<size_t>(tokens * e));
  r.topk.resize(static_cast<size_t>(tokens * k));
  core::parallel_for(tokens, [&](int64_t t) {
    float* row = r.logits.data() + t * e;
    for (int64_t x = 0; x < e; ++x) row[x] = hash_uniform(kLogitSeed, t * e + x);
    std::vector<int32_t> ids(static_cast<size_t>(e));
    for (int32_t x = 0; x < e; ++x) ids[x] = x;
    // NOTE: spec §2 FromLogits: top-k on the raw logits, ties to the smaller expert index.
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [row](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    std::copy(ids.begin(), ids.begin() + k, r.topk.begin() + t * k);
  });
  std::vector<char> touched(static_cast<size_t>(e), 0);
  for (size_t i = 0; i < r.topk.size(); ++i) {
    touched[r.topk[i]] = 1;
    r.checksum += static_cast<int64_t>(r.topk[i]) * static_cast<int64_t>(i % 997 + 1);
  }
  r.unique_experts = std::count(touched.begin(), touched.end(), 1);
  return r;
}

/// Writes the top-k ids as raw little-endian int32 [T, K] (read by anchor_grouped_mm.py).
inline void write_routing(const std::string& path, const Routing& r) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return;
  }
  std::fwrite(r.topk.data(), sizeof(int32_t), r.topk.size(), f);
  std::fclose(f);
}

// ---- Physical weights ---------------------------------------------------------------------------

/// Byte codes (hash & and) | or, with separate masks for even and odd bytes (bf16: low / high).
struct CodeMask {
  uint8_t and_even, or_even, and_odd, or_odd;
};
constexpr CodeMask kBf16Codes = {0xFF, 0x00, 0x80, 0x3C};    // +-[2^-7, 2^-5)
constexpr CodeMask kE4m3Codes = {0xB7, 0x00, 0xB7, 0x00};    // exponent field <= 6: no NaN
constexpr CodeMask kE2m1Codes = {0xFF, 0x00, 0xFF, 0x00};    // every nibble is a value
constexpr CodeMask kE4m3SfCodes = {0x0F, 0x30, 0x0F, 0x30};  // [2^-1, 2)
constexpr CodeMask kUe8m0Codes = {0x03, 0x7C, 0x03, 0x7C};   // 2^-3 .. 2^0 (codes 124..127)

__global__ void fill_codes_kernel(uint8_t* p, int64_t n, uint32_t seed, CodeMask m) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    // NOTE: the high index bits go into the seed: weight tensors pass 2^32 bytes.
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (seed + uint32_t(i >> 32) * 0x9E3779B9u);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const bool odd = i & 1;
    p[i] =
        static_cast<uint8_t>((h & (odd ? m.and_odd : m.and_even)) | (odd ? m.or_odd : m.or_even));
  }
}

inline Tensor random_codes(const std::vector<int64_t>& shape, DType dtype, CodeMask mask,
                           uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda(0));
  fill_codes_kernel<<<2048, 256>>>(t.ptr<uint8_t>(), static_cast<int64_t>(t.nbytes()), seed, mask);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  return t;
}

inline Tensor device_floats(int64_t n, float value) {
  std::vector<float> v(static_cast<size_t>(n), value);
  return core::copy_to(TensorView(v.data(), DType::kFP32, {n}), Device::cuda(0));
}

inline bool is_nvfp4(Family f) { return f == Family::kNVFP4 || f == Family::kNVFP4BF16Tok; }
inline bool has_scalars(Family f) { return is_nvfp4(f) || f == Family::kFP8; }

/// One GEMM's physical view over [E, rows, k] as prepare_weights lays it out
/// (reference/stepfun/weights.h): bf16 BlockMajorK [E, k/64, rows, 64]; fp8 / mxfp8 e4m3
/// [E, rows, k]; nvfp4* e2m1x2 [E, rows, k/2]; 128x4 block scales [E, pad128(rows), pad4(k/vec)].
inline void random_matrix(Family f, int64_t experts, int64_t rows, int64_t k, uint32_t seed,
                          Tensor* data, Tensor* scale) {
  if (f == Family::kBF16) {
    *data = random_codes({experts, k / formats::kBlockMajorK, rows, formats::kBlockMajorK},
                         DType::kBF16, kBf16Codes, seed);
    return;
  }
  if (is_nvfp4(f)) {
    *data = random_codes({experts, rows, k / 2}, DType::kE2M1x2, kE2m1Codes, seed);
  } else {
    *data = random_codes({experts, rows, k}, DType::kE4M3, kE4m3Codes, seed);
  }
  if (f == Family::kFP8) return;
  const int64_t vec = f == Family::kMXFP8 ? 32 : 16;
  const std::vector<int64_t> shape = {experts, formats::ceil_div(rows, 128) * 128,
                                      formats::ceil_div(k / vec, 4) * 4};
  *scale = f == Family::kMXFP8 ? random_codes(shape, DType::kUE8M0, kUe8m0Codes, seed + 1)
                               : random_codes(shape, DType::kE4M3, kE4m3SfCodes, seed + 1);
}

/// Random weights of family `f` for workload `w` with the per-expert scalars (fp32 [E]) and
/// gemm1_clamp_limit in the family's units (spec §3.2: L / output1_scale_gate_scalar where the
/// kernel clamps raw accumulators, L itself for bf16 and mxfp8).
inline StepFunWeights random_weights(const Workload& w, Family f) {
  StepFunWeights v;
  v.family = f;
  random_matrix(f, w.experts, 2 * w.inter, w.hidden, 101, &v.gemm1_weights, &v.gemm1_weights_scale);
  random_matrix(f, w.experts, w.hidden, w.inter, 202, &v.gemm2_weights, &v.gemm2_weights_scale);
  if (has_scalars(f)) {
    v.output1_scale_scalar = device_floats(w.experts, kScalar);
    v.output1_scale_gate_scalar = device_floats(w.experts, kScalar);
    v.output2_scale_scalar = device_floats(w.experts, kScalar);
  }
  v.gemm1_clamp_limit =
      device_floats(w.experts, has_scalars(f) ? kStepLimit / kScalar : kStepLimit);
  CAKEMOE_CUDA_CHECK(cudaDeviceSynchronize());
  return v;
}

/// Weight bytes of all experts (data and block scales), for the log line.
inline double weight_bytes(const StepFunWeights& v) {
  double bytes = 0;
  for (const Tensor* t :
       {&v.gemm1_weights, &v.gemm1_weights_scale, &v.gemm2_weights, &v.gemm2_weights_scale}) {
    if (t->defined()) bytes += static_cast<double>(t->nbytes());
  }
  return bytes;
}

// ---- Activations --------------------------------------------------------------------------------

/// a_gs of the activations (fp8, nvfp4): the format maximum over the hidden bound.
inline double hidden_scale_global(Family f) {
  if (f == Family::kNVFP4) return 2688.0 / kHiddenAmax;
  if (f == Family::kFP8) return 448.0 / kHiddenAmax;
  return 0.0;
}

/// Hidden states 12 * u [T, H] in bf16 on the host, quantized to the family's input format by
/// prepare_activations (host), then moved to the device.
inline StepFunActivations device_activations(const Workload& w, Family f, int64_t tokens) {
  Tensor hidden = Tensor::empty({tokens, w.hidden}, DType::kBF16);
  uint16_t* bits = hidden.ptr<uint16_t>();
  core::parallel_for(tokens, [&](int64_t t) {
    for (int64_t c = 0; c < w.hidden; ++c) {
      const int64_t i = t * w.hidden + c;
      bits[i] = formats::bf16_from_float(kHiddenAmax * hash_uniform(kHiddenSeed, i));
    }
  });
  StepFunActivations a = prepare_activations(f, hidden, hidden_scale_global(f));
  for (Tensor* t : {&a.hidden_states, &a.hidden_states_scale, &a.per_token_scale}) {
    if (t->defined()) *t = core::copy_to(*t, Device::cuda(0));
  }
  return a;
}

}  // namespace layer_bench
}  // namespace stepfun
}  // namespace cakemoe
