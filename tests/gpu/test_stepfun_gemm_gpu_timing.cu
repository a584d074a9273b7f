// Timing of the CUDA FC1 / FC2 kernels at the spec §10.3 geometry (H 4096, I 1536, E 64, K 8,
// T 2048; nvfp4, the default plan's tile) on random physical operands. Prints milliseconds and
// TFLOP/s (cudaEvent timing); nothing here is an assertion about speed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <vector>

#include "core/cuda_check.h"
#include "formats/layouts.h"
#include "gpu/cuda_timing.h"
#include "test_stepfun_gemm_gpu.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using gpu_gemm::upload;

/// Random bytes; scale-factor bytes drawn from [lo, lo + span) (finite e4m3 around 2^-3..2^1).
std::vector<uint8_t> random_bytes(size_t n, uint64_t seed, int lo = 0, int span = 256) {
  std::vector<uint8_t> out(n);
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<uint8_t>(lo + static_cast<int>((s >> 33) % static_cast<uint64_t>(span)));
  }
  return out;
}

TEST(StepfunGemmGpu, TimedAtSpecGeometryNvfp4) {
  CAKEMOE_REQUIRE_GPU();
  const int64_t t = 2048, h = 4096, inter = 1536, e = 64, k = 8;
  cakemoe::stepfun::ProblemDesc problem;
  problem.family = Family::kNVFP4;
  problem.num_tokens = t, problem.top_k = k, problem.local_num_experts = e;
  problem.hidden_size = h, problem.intermediate_size = inter;
  problem.device = Device::cuda(0);
  const int64_t tile = cakemoe::stepfun::default_plan(problem).tile;

  testbed::Rng rng(20261004);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < t; ++i) {
    std::vector<int32_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < k) {
      const int32_t x = static_cast<int32_t>(rng.integer(0, e));
      if (std::find(chosen.begin(), chosen.end(), x) == chosen.end()) chosen.push_back(x);
    }
    ids.insert(ids.end(), chosen.begin(), chosen.end());
  }
  RoutingConfig rc;
  rc.num_tokens = t, rc.top_k = k, rc.num_experts = e, rc.local_num_experts = e, rc.tile = tile;
  const RoutingTables tables = build_tables(rc, ids.data());
  const int64_t rows = table_sizes(rc).max_padded;
  auto table = [](const std::vector<int32_t>& v) {
    return upload(v.data(), {static_cast<int64_t>(v.size())}, DType::kInt32);
  };
  const Tensor p2t = table(tables.permuted_idx_to_token_idx);
  const Tensor batch = table(tables.cta_idx_xy_to_batch_idx);
  const Tensor limit = table(tables.cta_idx_xy_to_mn_limit);
  const Tensor num_ctas = upload(&tables.num_non_exiting_ctas, {1}, DType::kInt32);
  const Tensor total = upload(&tables.total_num_padded_tokens, {1}, DType::kInt32);

  const int64_t w1_sf = formats::sf_size_128x4(2 * inter, h / 16);
  const int64_t w2_sf = formats::sf_size_128x4(h, inter / 16);
  const Tensor x = upload(random_bytes(t * h / 2, 1).data(), {t, h / 2}, DType::kE2M1x2);
  const Tensor x_sf = upload(random_bytes(t * h / 16, 2, 0x30, 16).data(), {t, h / 16},
                             DType::kE4M3);
  const Tensor w1 = upload(random_bytes(e * 2 * inter * h / 2, 3).data(), {e, 2 * inter, h / 2},
                           DType::kE2M1x2);
  const Tensor w1s = upload(random_bytes(e * w1_sf, 4, 0x28, 16).data(), {e * w1_sf},
                            DType::kE4M3);
  const Tensor w2 = upload(random_bytes(e * h * inter / 2, 5).data(), {e, h, inter / 2},
                           DType::kE2M1x2);
  const Tensor w2s = upload(random_bytes(e * w2_sf, 6, 0x28, 16).data(), {e * w2_sf},
                            DType::kE4M3);
  const std::vector<float> ones(static_cast<size_t>(e), 1.0f), limits(static_cast<size_t>(e), 7.0f);
  const Tensor scalar = upload(ones.data(), {e}, DType::kFP32);
  const Tensor cl = upload(limits.data(), {e}, DType::kFP32);
  const Tensor y = gpu_gemm::poisoned({rows, inter / 2}, DType::kE2M1x2);
  const Tensor y_sf = gpu_gemm::poisoned({testing::sf_bytes(rows, inter / 16)}, DType::kE4M3);
  const Tensor out = gpu_gemm::poisoned({rows, h}, DType::kBF16);

  cakemoe::stepfun::Fc1Args a1;
  a1.family = Family::kNVFP4;
  a1.hidden_states = x, a1.hidden_states_scale = x_sf;
  a1.gemm1_weights = w1, a1.gemm1_weights_scale = w1s;
  a1.output1_scale_scalar = scalar, a1.output1_scale_gate_scalar = scalar;
  a1.gemm1_clamp_limit = cl;
  a1.permuted_idx_to_token_idx = p2t, a1.cta_idx_xy_to_batch_idx = batch;
  a1.cta_idx_xy_to_mn_limit = limit, a1.num_non_exiting_ctas = num_ctas;
  a1.total_num_padded_tokens = total;
  a1.gemm1_output = y, a1.gemm1_output_scale = y_sf;
  a1.top_k = k, a1.tile_tokens_dim = tile;
  cakemoe::stepfun::Fc2Args a2;
  a2.family = Family::kNVFP4;
  a2.gemm2_input = y, a2.gemm2_input_scale = y_sf;
  a2.gemm2_weights = w2, a2.gemm2_weights_scale = w2s;
  a2.output2_scale_scalar = scalar;
  a2.cta_idx_xy_to_batch_idx = batch, a2.cta_idx_xy_to_mn_limit = limit;
  a2.num_non_exiting_ctas = num_ctas;
  a2.gemm2_output = out;
  a2.num_tokens = t, a2.top_k = k, a2.tile_tokens_dim = tile;
  const auto fc1 = cakemoe::stepfun::prepare_fc1(a1);
  const auto fc2 = cakemoe::stepfun::prepare_fc2(a2);
  const double fc1_ms = gpu_testbed::time_ms([&] { fc1.launch(nullptr); }, 5);
  const double fc2_ms = gpu_testbed::time_ms([&] { fc2.launch(nullptr); }, 5);
  CAKEMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const double pairs = double(t * k);
  const double fc1_tflop = 2.0 * pairs * 2 * inter * h * 1e-12;
  const double fc2_tflop = 2.0 * pairs * h * inter * 1e-12;
  std::cout << "[timing nvfp4 T=" << t << " H=" << h << " I=" << inter << " E=" << e << " K=" << k
            << " tile=" << tile << "] fc1 " << fc1_ms << " ms (" << fc1_tflop / (fc1_ms * 1e-3)
            << " TFLOP/s), fc2 " << fc2_ms << " ms (" << fc2_tflop / (fc2_ms * 1e-3)
            << " TFLOP/s), fc1+fc2 " << fc1_ms + fc2_ms << " ms\n";
  // The FC2 output of the live rows was written (poison NaN bytes are gone from a valid row).
  const Tensor host = gpu_testbed::to_host(out);
  EXPECT_NE(host.ptr<uint16_t>()[0], 0xFFFF) << "row 0 of gemm2_output was not written";
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
