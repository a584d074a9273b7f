// BGMV plans under concurrency and in-place input changes (spec bgmv §8: a plan owns its
// workspaces and replays read current contents). Two plans of different variants, dtypes and
// shapes run on two streams from one thread, and are prepared and run from two host threads, and
// give the y / shrink_out bytes each gives alone; a caller's graph holding run() (outer capture),
// replayed after every input was overwritten in place, gives the bytes of the plan's own run on
// the new inputs and the oracle of the new inputs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bgmv/gpu/bgmv_plan_gpu.h"

namespace cakemoe {
namespace bgmv_gpu {
namespace {

namespace gt = gpu_testbed;

constexpr int kRounds = 4;  // runs per plan and stream (or thread)

/// A plan to run: its case and the options that pick its variant.
struct PlanRow {
  std::string name;
  CaseSpec spec;
  std::optional<bool> grouped, order_remap;
  BgmvOptions options() const {
    BgmvOptions o;
    o.grouped = grouped;
    o.order_remap = order_remap;
    return o;
  }
};

CaseSpec two_slices(CaseSpec s) {
  s.slices = 2;  // outside the Cake support set: the portable fallback
  return s;
}

/// Pairs of plans that run together: per-route + grouped, remapped + portable, split-hidden +
/// H 3072 rank 32 (the specialized variant on SM90 builds that have it, else generic).
std::vector<std::pair<PlanRow, PlanRow>> plan_pairs() {
  const PairOrder tok = PairOrder::kTokenMajor, slot = PairOrder::kSlotMajor;
  return {
      {{"per-route bf16", gpu_spec(DType::kBF16, 1024, 16, 8, 2, tok, 2, 64, 901), false, false},
       {"grouped fp16", gpu_spec(DType::kFP16, 768, 16, 8, 4, slot, 2, 64, 902), true, {}}},
      {{"remap bf16", gpu_spec(DType::kBF16, 1024, 8, 8, 2, PairOrder::kExpertSorted, 2, 64, 903),
        false, true},
       {"portable fp16",
        two_slices(gpu_spec(DType::kFP16, 1024, 16, 6, 2, slot, 2, 16, 904)),
        {},
        {}}},
      {{"split-hidden bf16", gpu_spec(DType::kBF16, 4096, 16, 4, 2, tok, 2, 64, 905), false, false},
       {"H3072 fp16", gpu_spec(DType::kFP16, 3072, 32, 64, 2, tok, 2, 32, 906), {}, {}}},
  };
}

/// One plan bound to its own stream, with y and shrink_out when it runs alone there.
struct SoloPlan {
  PlanRow row;
  GpuCase g;
  BgmvPlan plan;
  cudaStream_t stream = nullptr;
  std::vector<float> alone_y;
  std::vector<uint16_t> alone_shrink;

  explicit SoloPlan(const PlanRow& r) : row(r), g(bgmv_test::make_case(r.spec)) {
    CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    plan = g.prepare_gpu(row.options());
    poison_and_run(plan, stream);  // the first run binds the plan to this stream (spec §8)
    gt::sync_or_exit(stream, "alone: " + label());
    alone_y = fetch_y(plan.y_accum());
    alone_shrink = fetch_u16(plan.shrink_out());
  }
  ~SoloPlan() {
    plan.close();
    cudaStreamDestroy(stream);
  }
  SoloPlan(const SoloPlan&) = delete;
  SoloPlan& operator=(const SoloPlan&) = delete;

  std::string label() const {
    return row.name + " (" + describe(g.host) + ", " + plan.variant() + ")";
  }
  /// "" when y and shrink_out (host copies) are the bytes of the run alone, else why not.
  std::string diff_from_alone(const std::vector<float>& y,
                              const std::vector<uint16_t>& shrink) const {
    const ::testing::AssertionResult same_y = bitwise_equal(y, alone_y, g.host.spec.hidden);
    if (!same_y) return std::string("y: ") + same_y.message();
    const ::testing::AssertionResult same_s = bitwise_equal(shrink, alone_shrink, g.host.spec.rank);
    if (!same_s) return std::string("shrink_out: ") + same_s.message();
    return "";
  }
};

/// Both plans of a pair, each run alone once and checked against the fp64 oracle (so equal
/// bytes cannot mean "both left the poison").
std::vector<std::unique_ptr<SoloPlan>> make_solo_pair(const std::pair<PlanRow, PlanRow>& rows) {
  std::vector<std::unique_ptr<SoloPlan>> plans;
  plans.push_back(std::make_unique<SoloPlan>(rows.first));
  plans.push_back(std::make_unique<SoloPlan>(rows.second));
  for (const auto& p : plans) expect_close_to_oracle(p->g.host, p->alone_y, p->label());
  return plans;
}

TEST(BgmvConcurrencyGpu, TwoStreamsGiveTheBytesOfEachPlanAlone) {
  CAKEMOE_REQUIRE_GPU();
  for (const auto& rows : plan_pairs()) {
    const std::vector<std::unique_ptr<SoloPlan>> plans = make_solo_pair(rows);
    // Device snapshots of every round, allocated before any run: [plan][round] = {y, shrink}.
    std::vector<std::vector<std::pair<Tensor, Tensor>>> snaps(2);
    for (int p = 0; p < 2; ++p) {
      const BgmvPlan& plan = plans[p]->plan;
      for (int r = 0; r < kRounds; ++r) {
        snaps[p].emplace_back(
            Tensor::empty(plan.y_accum().sizes(), DType::kFP32, Device::cuda(0)),
            Tensor::empty(plan.shrink_out().sizes(), plan.shrink_out().dtype, Device::cuda(0)));
      }
    }
    // Rounds interleaved across the streams, nothing waits in between: the runs overlap.
    for (int r = 0; r < kRounds; ++r) {
      for (int p = 0; p < 2; ++p) {
        SoloPlan& s = *plans[p];
        poison_and_run(s.plan, s.stream);
        core::copy_tensor(snaps[p][r].first, s.plan.y_accum(), s.stream);
        core::copy_tensor(snaps[p][r].second, s.plan.shrink_out(), s.stream);
      }
    }
    for (const auto& s : plans) gt::sync_or_exit(s->stream, "concurrent: " + s->label());
    for (int p = 0; p < 2; ++p) {
      for (int r = 0; r < kRounds; ++r) {
        EXPECT_EQ(
            plans[p]->diff_from_alone(fetch_y(snaps[p][r].first), fetch_u16(snaps[p][r].second)),
            "")
            << plans[p]->label() << ", round " << r << " beside " << plans[1 - p]->label();
      }
    }
  }
}

TEST(BgmvConcurrencyGpu, TwoHostThreadsGiveTheBytesOfEachPlanAlone) {
  CAKEMOE_REQUIRE_GPU();
  for (const auto& rows : plan_pairs()) {
    const std::vector<std::unique_ptr<SoloPlan>> plans = make_solo_pair(rows);
    // Each thread prepares its own plan on the same inputs (prepare runs concurrently too) and
    // runs it on its stream; failures are collected as text and reported on the test thread.
    const auto body = [](const SoloPlan* s, std::string* error) {
      try {
        BgmvPlan mine = s->g.prepare_gpu(s->row.options());
        for (int r = 0; r < kRounds && error->empty(); ++r) {
          poison_and_run(mine, s->stream);
          gt::sync_or_exit(s->stream, "thread: " + s->label());
          const std::string d =
              s->diff_from_alone(fetch_y(mine.y_accum()), fetch_u16(mine.shrink_out()));
          if (!d.empty()) *error = "round " + std::to_string(r) + ", " + d;
        }
        mine.close();
      } catch (const std::exception& e) {
        *error = std::string("threw: ") + e.what();
      }
    };
    std::string errors[2];
    std::thread t0(body, plans[0].get(), &errors[0]);
    std::thread t1(body, plans[1].get(), &errors[1]);
    t0.join();
    t1.join();
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(errors[p], "") << plans[p]->label() << " from its own thread";
    }
  }
}

// ---- Outer graph replay after the inputs change in place ------------------------------------

/// New random contents for every input of `g` (host case and device buffers, same pointers):
/// x, every LoRA A / B block, routing weights; each pair moves to the next token (a bijection:
/// a token's experts stay distinct) and the LoRA indices rotate. Copies are queued on `stream`.
void overwrite_inputs(GpuCase& g, uint64_t seed, cudaStream_t stream) {
  Case& c = g.host;
  const int64_t t_n = c.spec.tokens;
  testbed::Rng rng(seed);
  const float a_scale = 0.5f / std::sqrt(float(c.spec.hidden));
  const float b_scale = 2.0f / std::sqrt(float(c.spec.rank));
  c.x = bgmv_test::random_half(rng, c.spec.dtype, c.x.size(), 1.0f);
  for (auto& a : c.lora_a) a = bgmv_test::random_half(rng, c.spec.dtype, a.size(), a_scale);
  for (auto& b : c.lora_b) b = bgmv_test::random_half(rng, c.spec.dtype, b.size(), b_scale);
  for (int64_t& t : c.sorted_token_ids) {
    if (t >= 0 && t < t_n) t = (t + 1) % t_n;  // padding pairs stay padding
  }
  for (float& w : c.topk_weights) w = rng.uniform(0.05f, 1.0f);
  std::rotate(c.lora_indices.begin(), c.lora_indices.begin() + 1, c.lora_indices.end());
  core::copy_tensor(g.x, c.x_view(), stream);
  for (size_t s = 0; s < g.a.size(); ++s) {
    core::copy_tensor(g.a[s], c.a_views()[s], stream);
    core::copy_tensor(g.b[s], c.b_views()[s], stream);
  }
  core::copy_tensor(g.sorted, c.sorted_view(), stream);
  core::copy_tensor(g.loras, c.lora_view(), stream);
  core::copy_tensor(g.weights, c.weights_view(), stream);
}

TEST(BgmvConcurrencyGpu, OuterGraphReplayAfterInPlaceChangeEqualsOwnRun) {
  CAKEMOE_REQUIRE_GPU();
  for (const auto& rows : plan_pairs()) {
    for (PlanRow row : {rows.first, rows.second}) {
      row.spec.nan_unused_blocks = false;  // every block gets new values anyway
      SoloPlan s(row);
      SCOPED_TRACE(s.label());
      const int64_t h = s.g.host.spec.hidden, r = s.g.host.spec.rank;
      // The caller's graph: run() inside a capture enqueues its kernels there (spec §8).
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeGlobal));
      s.plan.run(s.stream);
      CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(s.stream, &graph));
      CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

      overwrite_inputs(s.g, row.spec.seed + 1000, s.stream);
      core::fill_bytes(s.plan.y_accum(), 0xFF, s.stream);
      core::fill_bytes(s.plan.shrink_out(), 0xFF, s.stream);
      CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, s.stream));
      gt::sync_or_exit(s.stream, "outer graph replay");
      const std::vector<float> replayed_y = fetch_y(s.plan.y_accum());
      const std::vector<uint16_t> replayed_shrink = fetch_u16(s.plan.shrink_out());

      poison_and_run(s.plan, s.stream);  // the plan's own run on the new inputs
      gt::sync_or_exit(s.stream, "run on the new inputs");
      EXPECT_TRUE(bitwise_equal(replayed_y, fetch_y(s.plan.y_accum()), h))
          << "y: outer replay after the change vs run()";
      EXPECT_TRUE(bitwise_equal(replayed_shrink, fetch_u16(s.plan.shrink_out()), r))
          << "shrink_out: outer replay after the change vs run()";
      expect_close_to_oracle(s.g.host, replayed_y, s.label() + " after the change");
      EXPECT_FALSE(bitwise_equal(replayed_y, s.alone_y, h))
          << "the new inputs left y unchanged: the test would not see a stale replay";
      CAKEMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
      CAKEMOE_CUDA_CHECK(cudaGraphDestroy(graph));
    }
  }
}

}  // namespace
}  // namespace bgmv_gpu
}  // namespace cakemoe
