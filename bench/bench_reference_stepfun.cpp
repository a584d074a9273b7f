// Throughput of the CPU reference FC1 + FC2 (prints GFLOP/s). A plain main:
//   bench_reference_stepfun                 reduced geometry (H 1024, I 512, E 16, K 4, T 256), nvfp4
//   bench_reference_stepfun FAMILY          also the FlashInfer geometry of spec §10.3 (H 4096, I 1536,
//                                           E 64, K 8, T 512, ~155 GFLOP) for FAMILY, on random
//                                           physical weights (minutes on 2 cores)

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "reference/stepfun/stepfun_gemm_testing.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void report(const char* what, Family f, double fc1_s, double fc2_s, int64_t pairs, int64_t h,
            int64_t inter) {
  const double fc1_flop = 2.0 * pairs * 2 * inter * h, fc2_flop = 2.0 * pairs * h * inter;
  std::printf(
      "  %s %s: FC1 %.2f s (%.1f GFLOP/s), FC2 %.2f s (%.1f GFLOP/s), total %.2f s for "
      "%.1f GFLOP\n",
      what, testing::name(f), fc1_s, fc1_flop / fc1_s * 1e-9, fc2_s, fc2_flop / fc2_s * 1e-9,
      fc1_s + fc2_s, (fc1_flop + fc2_flop) * 1e-9);
}

void reduced_geometry() {
  testing::Dims d;
  d.tokens = 256, d.hidden = 1024, d.inter = 512, d.experts = 16, d.top_k = 4, d.tile = 8;
  const testing::Case c = testing::make_case(Family::kNVFP4, d, false);
  testing::PipelineOut out;
  const Fc1Problem p1 = testing::fc1_problem(c, &out.fc1);
  auto t0 = Clock::now();
  fc1(p1);
  const double fc1_s = seconds_since(t0);
  const Fc2Problem p2 = testing::fc2_problem(c, &out);
  t0 = Clock::now();
  fc2(p2);
  report("reduced (H 1024, I 512, E 16, K 4, T 256)", c.family, fc1_s, seconds_since(t0),
         d.tokens * d.top_k, d.hidden, d.inter);
}

/// Random contents a physical view of `family` may hold: finite, normal values of realistic size
/// (subnormal fp32 products would time the CPU's denormal assists instead of the GEMM).
void fill_physical(Family f, Tensor* data, Tensor* scale, testbed::Rng& rng) {
  if (f == Family::kBF16) {
    uint16_t* w = data->ptr<uint16_t>();
    for (int64_t i = 0; i < data->numel(); ++i) {
      const uint32_t r = static_cast<uint32_t>(rng.engine()());
      w[i] = static_cast<uint16_t>((r & 0x807Fu) | ((0x78u + ((r >> 8) & 7u)) << 7));  // 2^-7..1
    }
  } else {
    uint8_t* q = data->ptr<uint8_t>();
    for (size_t i = 0; i < data->nbytes(); ++i) {
      const uint8_t b = static_cast<uint8_t>(rng.engine()());
      q[i] = f == Family::kNVFP4 ? b : static_cast<uint8_t>(b & 0xF7);  // e4m3: no NaN codes
    }
  }
  if (scale->defined()) {
    uint8_t* s = scale->ptr<uint8_t>();
    for (size_t i = 0; i < scale->nbytes(); ++i) {
      s[i] = static_cast<uint8_t>((f == Family::kMXFP8 ? 120 : 0x20) + rng.integer(0, 16));
    }
  }
}

void flashinfer_geometry(Family f) {
  if (f == Family::kNVFP4BF16Tok) {
    std::printf("  nvfp4_bf16tok: time nvfp4 instead (same GEMM operands)\n");
    return;
  }
  const int64_t tokens = 512, h = 4096, inter = 1536, experts = 64, top_k = 8, tile = 8;
  testbed::Rng rng(7);

  // Physical weights and scalars straight from random bytes (preparing 2.4 GB of bf16 is not
  // what is being timed).
  StepFunWeights v;
  v.family = f;
  const bool nvfp4 = f == Family::kNVFP4;
  const int64_t vec = nvfp4 ? 16 : 32;
  const bool scaled = nvfp4 || f == Family::kMXFP8;
  const DType wt = nvfp4 ? DType::kE2M1x2 : f == Family::kBF16 ? DType::kBF16 : DType::kE4M3;
  const int64_t per_byte = nvfp4 ? 2 : 1;
  v.gemm1_weights = f == Family::kBF16 ? Tensor::empty({experts, h / 64, 2 * inter, 64}, wt)
                                       : Tensor::empty({experts, 2 * inter, h / per_byte}, wt);
  v.gemm2_weights = f == Family::kBF16 ? Tensor::empty({experts, inter / 64, h, 64}, wt)
                                       : Tensor::empty({experts, h, inter / per_byte}, wt);
  if (scaled) {
    v.gemm1_weights_scale = Tensor::empty({experts, 2 * inter, h / vec}, DType::kUInt8);
    v.gemm2_weights_scale = Tensor::empty({experts, h, inter / vec}, DType::kUInt8);
  }
  fill_physical(f, &v.gemm1_weights, &v.gemm1_weights_scale, rng);
  fill_physical(f, &v.gemm2_weights, &v.gemm2_weights_scale, rng);
  std::vector<float> ones(experts, 1e-3f), limits(experts, 7.0f);

  Tensor hidden = testing::random_bf16({tokens, h}, rng, 12.0f);
  const StepFunActivations acts = reference::stepfun::prepare_activations(f, hidden, 100.0);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < top_k; ++k)
      ids.push_back(static_cast<int32_t>((t * 7 + k * 8) % experts));
  }
  RoutingConfig rc;
  rc.num_tokens = tokens, rc.top_k = top_k, rc.num_experts = experts;
  rc.local_num_experts = experts, rc.tile = tile;
  const RoutingTables tables = build_tables(rc, ids.data());
  const int64_t rows = table_sizes(rc).max_padded;
  GemmTables gt;
  gt.permuted_idx_to_token_idx = tables.permuted_idx_to_token_idx.data();
  gt.cta_idx_xy_to_batch_idx = tables.cta_idx_xy_to_batch_idx.data();
  gt.cta_idx_xy_to_mn_limit = tables.cta_idx_xy_to_mn_limit.data();
  gt.num_non_exiting_ctas = tables.num_non_exiting_ctas;
  gt.cta_table_entries = static_cast<int64_t>(tables.cta_idx_xy_to_batch_idx.size());
  gt.tile = tile;

  const int64_t out_bytes = testing::fc1_row_bytes(f, inter);
  std::vector<uint8_t> fc1_out(rows * out_bytes), fc1_sf(testing::sf_bytes(rows, inter / vec));
  Fc1Problem p1;
  p1.family = f, p1.num_tokens = tokens, p1.hidden = h, p1.intermediate = inter;
  p1.num_experts = experts;
  p1.hidden_states = acts.hidden_states.data();
  p1.hidden_states_scale = scaled ? acts.hidden_states_scale.ptr<uint8_t>() : nullptr;
  p1.gemm1_weights = v.gemm1_weights.data();
  p1.gemm1_weights_scale = scaled ? v.gemm1_weights_scale.ptr<uint8_t>() : nullptr;
  p1.output1_scale_scalar = p1.output1_scale_gate_scalar = ones.data();
  p1.gemm1_clamp_limit = limits.data();
  p1.tables = gt;
  p1.gemm1_output = fc1_out.data(), p1.gemm1_output_scale = fc1_sf.data();
  p1.output_rows = rows;
  auto t0 = Clock::now();
  fc1(p1);
  const double fc1_s = seconds_since(t0);

  std::vector<uint16_t> gemm2(rows * h);
  Fc2Problem p2;
  p2.family = f, p2.hidden = h, p2.intermediate = inter, p2.num_experts = experts;
  p2.gemm2_input = fc1_out.data(), p2.gemm2_input_scale = fc1_sf.data();
  p2.gemm2_weights = v.gemm2_weights.data();
  p2.gemm2_weights_scale = scaled ? v.gemm2_weights_scale.ptr<uint8_t>() : nullptr;
  p2.output2_scale_scalar = ones.data();
  p2.tables = gt;
  p2.gemm2_output = gemm2.data(), p2.rows = rows;
  t0 = Clock::now();
  fc2(p2);
  report("FlashInfer geometry (H 4096, I 1536, E 64, K 8, T 512)", f, fc1_s, seconds_since(t0),
         tokens * top_k, h, inter);
}

}  // namespace
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe

int main(int argc, char** argv) {
  namespace rs = cakemoe::reference::stepfun;
  try {
    rs::reduced_geometry();
    if (argc > 1) rs::flashinfer_geometry(cakemoe::stepfun::parse_family(argv[1]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_reference_stepfun: %s\n", e.what());
    return 2;
  }
  return 0;
}
