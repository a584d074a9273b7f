// Shared pieces of the BGMV benchmarks (bench_bgmv.cu, lab/bench_bgmv_stages.cu): the cold-L2
// timing loop, shapes, routing and the operands of one shape. Included by bench_bgmv.cu only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_hash.cuh"
#include "cakemoe/bgmv.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"

namespace cakemoe {
namespace {

constexpr double kHbmTbPerS = 4.26;  // bench/NOTES.md HBM copy ceiling
constexpr size_t kFlushBytes = 256ull << 20;

// Deterministic bf16 values in about [-scale, scale] (a hash, no host traffic).
__global__ void fill_bf16_kernel(uint16_t* dst, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t h = bench::hash_index(i, seed);
    const float v = (static_cast<float>(h & 0xFFFF) / 32768.0f - 1.0f) * scale;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    dst[i] = static_cast<uint16_t>(bits >> 16);
  }
}

void fill_bf16(void* dst, int64_t n, uint32_t seed, float scale) {
  fill_bf16_kernel<<<1024, 256>>>(static_cast<uint16_t*>(dst), n, seed, scale);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
}

/// The A, B and x buffers every shape of a table views into: deterministic bf16 values, A and B
/// of `weight_elems` each (sized for the largest shape), x of `x_elems`; filled once, freed with
/// the table.
struct TableBuffers {
  void* a = nullptr;
  void* b = nullptr;
  void* x = nullptr;
  TableBuffers(int64_t weight_elems, int64_t x_elems) {
    CAKEMOE_CUDA_CHECK(cudaMalloc(&a, weight_elems * 2));
    CAKEMOE_CUDA_CHECK(cudaMalloc(&b, weight_elems * 2));
    CAKEMOE_CUDA_CHECK(cudaMalloc(&x, x_elems * 2));
    fill_bf16(a, weight_elems, 1, 0.01f);
    fill_bf16(b, weight_elems, 2, 0.05f);
    fill_bf16(x, x_elems, 3, 1.0f);
    CAKEMOE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~TableBuffers() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(x);
  }
  TableBuffers(const TableBuffers&) = delete;
  TableBuffers& operator=(const TableBuffers&) = delete;
};

/// A plan's label in the tables: backend, variant and schedule, pipeline, shrink kind (spec form
/// number, as in older tables) and splits, PDL mode (e.g. "cake grouped f4s1 pdl0",
/// "cake spec s1 pdl0").
std::string plan_label(const bgmv::BgmvPlan& plan) {
  const auto launch = plan.shrink_launch();
  return plan.backend_used() +
         (plan.variant() == "specialized"
              ? " spec s" + std::to_string(plan.schedule_id().value_or(-1))
              : "") +
         (plan.grouped() ? " grouped" : "") + (plan.order_remap() ? " remap" : "") +
         (launch ? " f" + std::to_string(bgmv::shrink_form_number(launch->kind)) + "s" +
                       std::to_string(launch->splits)
                 : "") +
         " pdl" + std::to_string(plan.pdl_mode());
}

/// The line a table prints when its --budget ran out before its last shape.
void report_budget_stop(size_t done, size_t total, double budget_s) {
  if (done < total) {
    std::printf("stopped after %zu of %zu shapes: %.0f s budget spent (--budget=S)\n", done, total,
                budget_s);
  }
}

/// How the L2 is emptied before each rep.
/// NOTE: kRead (default) streams a 256 MB buffer (5x the 50 MB L2) that was written once at setup,
/// with L2-only loads. Its lines are clean, so nothing it leaves behind needs a write-back later;
/// the dirty lines the previous rep left (y, shrink_out, route index) are evicted, and written
/// back, while it runs. kMemset is the protocol of the 2026-11-29 results (memset of the buffer
/// per rep): it leaves ~50 MB of dirty lines whose write-back can land inside the timed region
/// (bench/NOTES.md recommendation 6), so its numbers may be inflated at large T.
/// Both are ordered before the start event by the stream; the host does not synchronise there,
/// because a host sync would put the graph launch's submission latency inside the timed region.
/// kNone (diagnostics only, never a results table): no flush, so code, weights and indices stay
/// in L2 between reps; a phase that gets faster under it waited on HBM (e.g. instruction fetch
/// of a kernel's cold code after the flush).
enum class FlushMode { kRead, kMemset, kNone };

__global__ void l2_flush_read_kernel(const uint4* src, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;  // practically never; keeps the loads alive
}

struct Bench {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* flush = nullptr;
  uint32_t* sink = nullptr;
  int reps = 50;
  int flush_ctas = 0;
  FlushMode flush_mode = FlushMode::kRead;

  Bench() {
    CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CAKEMOE_CUDA_CHECK(cudaEventCreate(&start));
    CAKEMOE_CUDA_CHECK(cudaEventCreate(&stop));
    CAKEMOE_CUDA_CHECK(cudaMalloc(&flush, kFlushBytes));
    CAKEMOE_CUDA_CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
    CAKEMOE_CUDA_CHECK(cudaMemsetAsync(flush, 0x5A, kFlushBytes, stream));
    CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    flush_ctas = 8 * core::cuda_sm_count(0);
  }
  ~Bench() {
    cudaFree(sink);
    cudaFree(flush);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
  }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  const char* flush_name() const {
    return flush_mode == FlushMode::kRead     ? "256 MB clean read"
           : flush_mode == FlushMode::kMemset ? "256 MB memset"
                                              : "none: L2 warm, diagnostics only";
  }

  void flush_l2(int rep) {
    if (flush_mode == FlushMode::kNone) return;
    if (flush_mode == FlushMode::kMemset) {
      CAKEMOE_CUDA_CHECK(cudaMemsetAsync(flush, rep & 0xFF, kFlushBytes, stream));
      return;
    }
    l2_flush_read_kernel<<<flush_ctas, 256, 0, stream>>>(static_cast<const uint4*>(flush),
                                                         kFlushBytes / sizeof(uint4), sink);
    CAKEMOE_CUDA_CHECK(cudaGetLastError());
  }

  /// Median µs of `enqueue` over `reps` reps, each after an L2 flush. The caller warms up.
  template <typename F>
  double time_reps(F&& enqueue) {
    std::vector<float> us;
    for (int i = 0; i < reps; ++i) {
      flush_l2(i);
      CAKEMOE_CUDA_CHECK(cudaEventRecord(start, stream));
      enqueue();
      CAKEMOE_CUDA_CHECK(cudaEventRecord(stop, stream));
      CAKEMOE_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CAKEMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      us.push_back(ms * 1000.0f);
    }
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    return us[us.size() / 2];
  }

  /// Median µs of plan.run() (graph replay after the first capture), cold L2.
  double time_plan(bgmv::BgmvPlan& plan) {
    plan.run(stream);  // capture + first replay
    CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const double us = time_reps([&] { plan.run(stream); });
    plan.close();
    return us;
  }

  /// Median µs of replays of `exec` on the bench stream, cold L2 (one warm-up replay first).
  double time_graph(cudaGraphExec_t exec) {
    CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    return time_reps([&] { CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  }
};

struct Shape {
  int64_t hidden, rank, tokens, top_k, loras, experts;
};

/// "H,R,T,k,L[,E]" (--rows) into `s`, E 128 when left out; `has_experts` says whether
/// it was given. False unless at least the first five fields parse.
bool parse_shape(const std::string& text, Shape* s, bool* has_experts = nullptr) {
  long long h = 0, r = 0, t = 0, k = 0, l = 0, e = 128;
  const int got =
      std::sscanf(text.c_str(), "%lld,%lld,%lld,%lld,%lld,%lld", &h, &r, &t, &k, &l, &e);
  if (got < 5) return false;
  *s = Shape{h, r, t, k, l, e};
  if (has_experts != nullptr) *has_experts = got == 6;
  return true;
}

/// Routing of one shape: token-major top-k distinct experts, every token with a LoRA.
struct Routing {
  std::vector<int64_t> sorted, experts, loras;
  std::vector<float> weights;
  int64_t bins_touched = 0;
};

Routing make_routing(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Routing r;
  std::vector<int64_t> ids(s.experts);
  std::set<int64_t> bins;
  r.loras.resize(s.tokens);
  for (int64_t t = 0; t < s.tokens; ++t) {
    r.loras[t] = static_cast<int64_t>(rng() % s.loras);
    std::iota(ids.begin(), ids.end(), 0);
    for (int64_t j = 0; j < s.top_k; ++j) {
      std::swap(ids[j], ids[j + rng() % (s.experts - j)]);
      r.sorted.push_back(t);
      r.experts.push_back(ids[j]);
      r.weights.push_back(1.0f / static_cast<float>(s.top_k));
      bins.insert(r.loras[t] * s.experts + ids[j]);
    }
  }
  r.bins_touched = static_cast<int64_t>(bins.size());
  return r;
}

/// spec §14 bytes_min: x, each touched bin's A and B once, y written once, indices, shrink_out.
/// With bins = P it is §14's bytes_per_route (every route reads its own A and B rows).
double bytes_min(const Shape& s, int64_t bins) {
  const double b = 2, p = double(s.tokens * s.top_k);
  return b * s.hidden * (s.tokens + 2.0 * bins * s.rank) + 4.0 * s.tokens * s.hidden +
         p * (8 + 8 + 4) + s.tokens * 8.0 + 2.0 * p * s.rank * b;
}

template <typename T>
Tensor upload(const std::vector<T>& v, DType dtype) {
  const TensorView host(const_cast<T*>(v.data()), dtype, {static_cast<int64_t>(v.size())});
  return core::copy_to(host, Device::cuda(0));
}

/// Device operands of one shape: views into the shared weight / x buffers, uploaded routing.
struct Inputs {
  Routing routing;
  TensorView x, a, b;
  Tensor sorted, experts, loras, weights;

  Inputs(const Shape& s, void* a_buf, void* b_buf, void* x_buf)
      : routing(make_routing(s, 1234 + s.tokens * 7 + s.top_k)),
        x(x_buf, DType::kBF16, {s.tokens, s.hidden}, Device::cuda(0)),
        a(a_buf, DType::kBF16, {s.loras, s.experts, s.rank, s.hidden}, Device::cuda(0)),
        b(b_buf, DType::kBF16, {s.loras, s.experts, s.hidden, s.rank}, Device::cuda(0)),
        sorted(upload(routing.sorted, DType::kInt64)),
        experts(upload(routing.experts, DType::kInt64)),
        loras(upload(routing.loras, DType::kInt64)),
        weights(upload(routing.weights, DType::kFP32)) {}
};

}  // namespace
}  // namespace cakemoe
