// StepFun bitwise stages on the GPU: routing (bf16 logits / precomputed ids), per-token NVFP4
// requant and finalize, each prepared once and timed as a replayed CUDA graph with cudaEvents
// (warm L2). Prints µs per call and the HBM bytes it must move against the 4.26 TB/s copy ceiling
// (bench/NOTES.md). A plain main: without a CUDA device it says so and exits 0.
#include <cstdio>

#include "core/cuda_util.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_check.h"
#include "formats/codecs.h"
#include "formats/layouts.h"

namespace cakemoe {
namespace stepfun {
namespace {

constexpr double kHbmCopy = 4.26e12;  // bytes/s, bench/NOTES.md
constexpr int kReplays = 50;

Tensor device_tensor(const std::vector<int64_t>& shape, DType dtype) {
  return Tensor::empty(shape, dtype, Device::cuda(0));
}

/// Device bf16 tensor of deterministic pseudo-random values in (-4, 4).
Tensor device_bf16(const std::vector<int64_t>& shape, uint32_t seed) {
  Tensor h = Tensor::empty(shape, DType::kBF16);
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < h.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    h.ptr<uint16_t>()[i] = formats::bf16_from_float(((s >> 8) * 0x1.0p-24f - 0.5f) * 8.0f);
  }
  return core::copy_to(h, Device::cuda(0));
}

/// µs per launch of `launch`, replayed from a CUDA graph.
double time_us(const StepFunStageLaunch& launch) {
  cudaStream_t stream = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch.launch(stream);
  CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int r = 0; r < kReplays; ++r) launch.launch(stream);
  CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  cudaEvent_t start = nullptr, stop = nullptr;
  CAKEMOE_CUDA_CHECK(cudaEventCreate(&start));
  CAKEMOE_CUDA_CHECK(cudaEventCreate(&stop));
  CAKEMOE_CUDA_CHECK(cudaEventRecord(start, stream));
  CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CAKEMOE_CUDA_CHECK(cudaEventRecord(stop, stream));
  CAKEMOE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CAKEMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return ms * 1e3 / kReplays;
}

void report(const std::string& what, double us, double bytes) {
  std::printf("%-46s %9.2f us  %8.2f MB  %6.3f TB/s  floor %8.2f us\n", what.c_str(), us,
              bytes * 1e-6, bytes / (us * 1e-6) * 1e-12, bytes / kHbmCopy * 1e6);
}

void bench_routing(int64_t t, int64_t e, int64_t k, int64_t tile, bool logits) {
  const int64_t mc = max_ctas(t, k, e, tile);
  std::vector<Tensor> keep;
  auto make = [&](const std::vector<int64_t>& shape, DType d) {
    keep.push_back(device_tensor(shape, d));
    return keep.back().view();
  };
  RoutingArgs a;
  if (logits) {
    keep.push_back(device_bf16({t, e}, static_cast<uint32_t>(t + e)));
    a.routing_logits = keep.back();
    a.topk_packed = make({t, k}, DType::kInt32);
    a.topk_weights = make({t, k}, DType::kBF16);
  } else {
    Tensor ids = Tensor::empty({t, k}, DType::kInt32);
    for (int64_t i = 0; i < t * k; ++i) ids.ptr<int32_t>()[i] = static_cast<int32_t>((i * 7) % e);
    keep.push_back(core::copy_to(ids, Device::cuda(0)));
    a.topk_ids = keep.back();
    a.topk_weights = make({t, k}, DType::kFP32);
  }
  a.expert_count_histogram = make({2 * e}, DType::kInt32);
  a.total_num_padded_tokens = make({1}, DType::kInt32);
  a.expanded_idx_to_permuted_idx = make({t * k}, DType::kInt32);
  a.permuted_idx_to_token_idx = make({mc * tile + 1}, DType::kInt32);
  a.cta_idx_xy_to_batch_idx = make({mc}, DType::kInt32);
  a.cta_idx_xy_to_mn_limit = make({mc}, DType::kInt32);
  a.num_non_exiting_ctas = make({1}, DType::kInt32);
  a.num_experts = e;
  a.top_k = k;
  a.local_num_experts = e;
  a.tile_tokens_dim = tile;
  const double us = time_us(prepare_routing(a));
  const double bytes = (logits ? t * e * 2.0 + t * k * 6.0 : t * k * 4.0) + t * k * 4.0 +
                       (mc * tile + 1) * 4.0 + mc * 8.0;
  report("routing " + std::string(logits ? "bf16 logits" : "ids") + " T=" + std::to_string(t) +
             " E=" + std::to_string(e) + " K=" + std::to_string(k) + " tile=" +
             std::to_string(tile),
         us, bytes);
}

void bench_requant(int64_t rows, int64_t cols, int64_t expanded) {
  const int64_t sf_bytes = formats::sf_size(SfLayout::kR8C4, rows, cols / 16);
  std::vector<Tensor> keep = {device_bf16({rows, cols}, 5),
                              device_tensor({expanded}, DType::kInt32),
                              device_tensor({rows, cols / 2}, DType::kUInt8),
                              device_tensor({sf_bytes}, DType::kUInt8),
                              device_tensor({rows}, DType::kFP32)};
  Tensor e2p = Tensor::empty({expanded}, DType::kInt32);
  for (int64_t i = 0; i < expanded; ++i) e2p.ptr<int32_t>()[i] = static_cast<int32_t>(i % rows);
  core::copy_tensor(keep[1], e2p);
  core::cuda_stream_sync(nullptr);
  RequantArgs a;
  a.gemm1_output = keep[0];
  a.expanded_idx_to_permuted_idx = keep[1];
  a.output = keep[2];
  a.output_scale = keep[3];
  a.per_token_scale = keep[4];
  const double us = time_us(prepare_requant(a));
  const double bytes = expanded * (cols * 2.0 + cols / 2.0 + cols / 16.0 + 8.0);
  report("requant r8c4 rows=" + std::to_string(expanded) + " I=" + std::to_string(cols), us, bytes);
}

void bench_finalize(int64_t t, int64_t k, int64_t h) {
  const int64_t rows = t * k;
  std::vector<Tensor> keep = {device_bf16({rows, h}, 9), device_tensor({t, k}, DType::kFP32),
                              device_tensor({t * k}, DType::kInt32),
                              device_tensor({1}, DType::kInt32),
                              device_tensor({t, h}, DType::kBF16)};
  Tensor e2p = Tensor::empty({t * k}, DType::kInt32);
  for (int64_t i = 0; i < t * k; ++i) e2p.ptr<int32_t>()[i] = static_cast<int32_t>(i);
  core::copy_tensor(keep[2], e2p);
  core::fill_bytes(keep[1], 0);
  core::cuda_stream_sync(nullptr);
  FinalizeArgs a;
  a.gemm2_output = keep[0];
  a.expert_weights = keep[1];
  a.expanded_idx_to_permuted_idx = keep[2];
  a.total_num_padded_tokens = keep[3];
  a.output = keep[4];
  a.num_experts = 64;
  const double us = time_us(prepare_finalize(a));
  const double bytes = rows * h * 2.0 + t * h * 2.0 + rows * 8.0;
  report("finalize fp32 w T=" + std::to_string(t) + " K=" + std::to_string(k) + " H=" +
             std::to_string(h),
         us, bytes);
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
#endif  // CAKEMOE_WITH_CUDA

int main() {
  if (cakemoe::core::cuda_device_count() == 0) {
    std::printf("bench_stepfun_routing: no CUDA device visible (or a build without CUDA); "
                "nothing to measure. Run it on the H200 through scripts/gpu-check.sh.\n");
    return 0;
  }
#if defined(CAKEMOE_WITH_CUDA)
  using namespace cakemoe::stepfun;
  try {
    for (int64_t t : {1, 16, 256, 2048, 16384}) {
      for (int64_t e : {64, 288, 512}) bench_routing(t, e, 8, 8, true);
    }
    bench_routing(16384, 512, 32, 64, true);
    bench_routing(2048, 288, 8, 8, false);
    bench_routing(16384, 288, 8, 64, false);
    bench_requant(2560, 1536, 2048);
    bench_requant(20480, 1536, 16384);
    for (int64_t t : {16, 2048, 16384}) bench_finalize(t, 8, 4096);
  } catch (const cakemoe::Error& e) {
    std::printf("bench_stepfun_routing: %s\n", e.what());
    return 1;
  }
#endif
  return 0;
}
