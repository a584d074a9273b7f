// BGMV plans on the GPU: routing edge cases (padding, extra route, LoRA -1), column-slice
// y_accum, graph semantics of spec §8 (outer capture, owner stream, close), the route index
// counters (§3.3) and the portable fallback (§9).
#include <cuda_runtime_api.h>

#include <cmath>
#include <string>
#include <vector>

#include "bgmv/gpu/bgmv_plan_gpu.h"
#include "bgmv/warnings.h"
#include "cakemoe/errors.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"

namespace cakemoe {
namespace bgmv_gpu {
namespace {

CaseSpec small_spec(DType dtype, uint64_t seed) {
  CaseSpec s;
  s.dtype = dtype;
  s.hidden = 1024;
  s.rank = 16;
  s.tokens = 6;
  s.loras = 2;
  s.experts = 16;
  s.order = PairOrder::kSlotMajor;
  s.seed = seed;
  return s;
}

void expect_gpu_equals_cpu(GpuCase& g, const BgmvOptions& options, const std::string& label) {
  BgmvPlan gpu = g.prepare_gpu(options);
  BgmvPlan cpu = g.prepare_cpu(options);
  gpu.run(nullptr);
  cpu.run(nullptr);
  const std::vector<float> y = fetch_y(gpu.y_accum());
  EXPECT_TRUE(matches_cpu(gpu, y, fetch_y(cpu.y_accum()), g.host.spec.hidden)) << label;
  expect_close_to_oracle(g.host, y, label);
}

TEST(BgmvPlanGpuRouting, SmallPaddingExtraRouteAndNoLora) {
  CAKEMOE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    Case c = bgmv_test::make_case(small_spec(dtype, 11));
    c.lora_indices[2] = -1;
    c.add_pair(-1, 0, 0.0f);  // padding: token -1 and token T, expert 0, weight 0
    c.add_pair(c.spec.tokens, 0, 0.0f);
    GpuCase padded(c);
    expect_gpu_equals_cpu(padded, BgmvOptions(), "padding pairs");
    // An extra valid route for token 1 (P != k T): the general path.
    CaseSpec es = small_spec(dtype, 12);
    es.order = PairOrder::kTokenMajor;
    es.nan_unused_blocks = false;  // the extra route reads a block no other route reads
    Case e = bgmv_test::make_case(es);
    e.add_pair(1, 0, 0.25f);
    GpuCase extra(e);
    expect_gpu_equals_cpu(extra, BgmvOptions(), "extra route");
  }
}

// spec §10 rule 12 on device tensors: prepare copies the index tensors to the host and checks
// them before anything is allocated or written.
TEST(BgmvPlanGpuRouting, SmallPrepareChecksDeviceIndexRanges) {
  CAKEMOE_REQUIRE_GPU();
  Case c = bgmv_test::make_case(small_spec(DType::kBF16, 18));
  const auto expect_invalid = [](GpuCase& g, const std::string& argument) {
    try {
      g.prepare_gpu();
      FAIL() << "expected InvalidArgument naming " << argument;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  Case bad_expert = c;
  bad_expert.expert_ids[3] = bad_expert.spec.experts;
  GpuCase g1(bad_expert);
  expect_invalid(g1, "expert_ids");
  Case bad_lora = c;
  bad_lora.lora_indices[1] = bad_lora.spec.loras;
  GpuCase g2(bad_lora);
  expect_invalid(g2, "lora_indices");
  GpuCase ok(c);
  EXPECT_EQ(ok.prepare_gpu().backend_used(), "cake");
  // x on the host with the rest on the device: rule 10.
  EXPECT_THROW(bgmv::prepare_bgmv_moe(ok.host.x_view(), ok.views(ok.a), ok.views(ok.b), ok.sorted,
                                      ok.experts, ok.loras, ok.weights, c.spec.experts),
               InvalidArgument);
}

TEST(BgmvPlanGpuRouting, RouteIndexCountersAfterFourRuns) {
  CAKEMOE_REQUIRE_GPU();
  GpuCase g(bgmv_test::make_case(small_spec(DType::kBF16, 13)));
  BgmvPlan plan = g.prepare_gpu();
  ASSERT_FALSE(plan.grouped());
  for (int i = 0; i < 4; ++i) plan.run(nullptr);
  core::cuda_stream_sync(nullptr);
  const TensorView header(plan.route_index().data, DType::kInt32, {4}, Device::cuda(0));
  const Tensor words = gpu_testbed::to_host(header);
  EXPECT_EQ(words.ptr<int32_t>()[0], 4);
  EXPECT_EQ(words.ptr<int32_t>()[1], 1);
}

TEST(BgmvPlanGpuLayout, SmallColumnSliceKeepsNanCanaries) {
  CAKEMOE_REQUIRE_GPU();
  GpuCase g(bgmv_test::make_case(small_spec(DType::kBF16, 14)));
  const int64_t t_n = g.host.spec.tokens, h = g.host.spec.hidden, wide = h + 64;
  Tensor buffer = Tensor::empty({t_n, wide}, DType::kFP32, Device::cuda(0));
  core::fill_bytes(buffer, 0xFF, nullptr);  // NaN everywhere
  BgmvOptions o;
  o.y_accum = TensorView(buffer.data(), DType::kFP32, {t_n, h}, {wide, 1}, Device::cuda(0));
  BgmvPlan gpu = g.prepare_gpu(o);
  BgmvPlan cpu = g.prepare_cpu();
  for (int i = 0; i < 3; ++i) gpu.run(nullptr);
  cpu.run(nullptr);
  EXPECT_TRUE(matches_cpu(gpu, fetch_y(gpu.y_accum()), fetch_y(cpu.y_accum()), h));
  core::cuda_stream_sync(nullptr);
  const Tensor host = gpu_testbed::to_host(buffer);
  for (int64_t t = 0; t < t_n; ++t) {
    for (int64_t c = h; c < wide; ++c) {
      ASSERT_TRUE(std::isnan(host.ptr<float>()[t * wide + c]))
          << "canary overwritten at row " << t << " col " << c;
    }
  }
  // The portable path needs a fully contiguous y_accum.
  CaseSpec ts = small_spec(DType::kBF16, 15);
  ts.slices = 2;
  GpuCase two(bgmv_test::make_case(ts));
  Tensor wide2 = Tensor::empty({t_n, 2 * h + 64}, DType::kFP32, Device::cuda(0));
  BgmvOptions sliced;
  sliced.y_accum =
      TensorView(wide2.data(), DType::kFP32, {t_n, 2 * h}, {2 * h + 64, 1}, Device::cuda(0));
  try {
    two.prepare_gpu(sliced);
    FAIL() << "expected InvalidArgument for a sliced portable y_accum";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "y_accum") << e.what();
  }
}

TEST(BgmvPlanGpuGraph, SmallOuterCapturePassthrough) {
  CAKEMOE_REQUIRE_GPU();
  GpuCase g(bgmv_test::make_case(small_spec(DType::kBF16, 16)));
  BgmvPlan gpu = g.prepare_gpu();
  expect_outer_capture_replays(g, gpu, 3);
}

TEST(BgmvPlanGpuGraph, SmallWrongStreamRaisesAndCloseRebinds) {
  CAKEMOE_REQUIRE_GPU();
  for (bool portable : {false, true}) {
    CaseSpec spec = small_spec(DType::kFP16, 17);
    if (portable) spec.slices = 2;
    GpuCase g(bgmv_test::make_case(spec));
    cudaStream_t s1 = nullptr, s2 = nullptr;
    CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    BgmvPlan plan = g.prepare_gpu();
    ASSERT_EQ(plan.backend_used(), portable ? "portable" : "cake");
    plan.run(s1);
    plan.run(s1);
    try {
      plan.run(s2);
      FAIL() << "expected InvalidArgument for a replay on another stream";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.rule()).find("must replay on its original CUDA stream"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(plan.run(nullptr), InvalidArgument);
    plan.close();
    poison_and_run(plan, s2);
    CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(s2));
    expect_close_to_oracle(g.host, fetch_y(plan.y_accum()), portable ? "portable" : "cake");
    EXPECT_THROW(plan.run(s1), InvalidArgument);
    plan.close();
    plan.close();  // idempotent
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
  }
}

TEST(BgmvPlanGpuPortable, FallbackShapesMatchOracle) {
  CAKEMOE_REQUIRE_GPU();
  std::vector<std::string> messages;
  const bgmv::WarningHook previous =
      bgmv::set_warning_hook([&](const std::string& m) { messages.push_back(m); });
  bgmv::detail::reset_warned_reasons();
  struct Row {
    int64_t h, r, t, slices;
    DType dtype;
    PairOrder order;
    int64_t k;
  };
  const Row rows[] = {{2048, 16, 8, 2, DType::kBF16, PairOrder::kTokenMajor, 2},
                      {3072, 32, 4, 2, DType::kFP16, PairOrder::kSlotMajor, 2},
                      {2048, 16, 40, 2, DType::kBF16, PairOrder::kExpertSorted, 2},
                      {1024, 12, 9, 1, DType::kBF16, PairOrder::kSlotMajor, 4},
                      {2052, 16, 7, 1, DType::kFP16, PairOrder::kTokenMajor, 2},
                      {2052, 12, 5, 2, DType::kBF16, PairOrder::kSlotMajor, 3}};
  uint64_t seed = 700;
  for (const Row& row : rows) {
    CaseSpec s = small_spec(row.dtype, ++seed);
    s.hidden = row.h;
    s.rank = row.r;
    s.tokens = row.t;
    s.slices = row.slices;
    s.order = row.order;
    s.top_k = row.k;
    GpuCase g(bgmv_test::make_case(s));
    BgmvPlan plan = g.prepare_gpu();
    const std::string label = "portable H=" + std::to_string(row.h) +
                              " R=" + std::to_string(row.r) + " S=" + std::to_string(row.slices);
    ASSERT_EQ(plan.backend_used(), "portable") << label;
    EXPECT_FALSE(plan.fallback_reason().empty());
    EXPECT_FALSE(plan.schedule_id().has_value());
    for (int i = 0; i < 3; ++i) {
      poison_and_run(plan, nullptr);
      expect_close_to_oracle(g.host, fetch_y(plan.y_accum()), label + " run " + std::to_string(i));
    }
    BgmvOptions strict;
    strict.fallback = false;
    EXPECT_THROW(g.prepare_gpu(strict), Unsupported) << label;
  }
  // One warning per distinct reason: slices, rank 12, hidden 2052 (the last row repeats); where
  // the driver does not load native code (CUDA_FORCE_PTX_JIT=1) every row falls back for that
  // one reason.
  EXPECT_EQ(messages.size(), core::cuda_native_code_loads(0) ? 3u : 1u);
  bgmv::set_warning_hook(previous);
}

}  // namespace
}  // namespace bgmv_gpu
}  // namespace cakemoe
