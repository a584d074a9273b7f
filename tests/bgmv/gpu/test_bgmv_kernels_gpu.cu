// BGMV CUDA kernels called through src/bgmv/cake_launch.h directly (no plan): the Cake generic
// shrink/expand must equal reference::bgmv bit for bit (spec §3.2, same splits) for the §11.2
// generic matrix and the route-index corner cases; the portable pair within 1e-5 of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bgmv/gpu/bgmv_kernels_gpu.h"
#include "cakemoe/errors.h"
#include "testbed/gpu/gpu_testbed.h"

namespace cakemoe {
namespace bgmv_gpu_test {
namespace {

using bgmv_test::CaseSpec;
using bgmv_test::PairOrder;

constexpr uint32_t kCanary = 0xFFFFFFFFu;  // the 0xFF poison of DeviceBuffer

/// y rows without the padding columns, as doubles (for the oracle comparison).
std::vector<double> compact_y(const std::vector<float>& y, int64_t rows, int64_t width,
                              int64_t stride) {
  std::vector<double> out(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) out[r * width + c] = y[r * stride + c];
  }
  return out;
}

/// Launches `runs` more times (after `done` earlier runs on the same route index) and checks every
/// run against the canonical reference, bitwise, the first also against the fp64 oracle within
/// 1e-2; then the route index header and the self-reset split counters.
void check_runs(CakeRun& run, const bgmv_test::Case& c, const LaunchConfig& cfg, int runs, int done,
                const char* label) {
  SCOPED_TRACE(label);
  const CakeParams& p = run.params();
  SCOPED_TRACE("T=" + std::to_string(p.T) + " H=" + std::to_string(p.H) +
               " R=" + std::to_string(p.R) + " P=" + std::to_string(p.P) +
               " dtype=" + std::to_string(p.dtype) + " shrink=" + shrink_kind_name(p.shrink) +
               " splits=" + std::to_string(p.splits) +
               " schedule=" + std::to_string(p.schedule_id) + " pdl=" + std::to_string(p.pdl_mode) +
               " remap=" + std::to_string(cfg.remap));
  const Expected want = expected(c, p.splits, run.stride(), kCanary);
  for (int i = 0; i < runs; ++i) {
    SCOPED_TRACE("run " + std::to_string(done + i));
    run.poison_outputs();
    run.launch();
    run.sync();
    const std::vector<uint16_t> shrink = run.shrink_out();
    const std::vector<float> y = run.y();
    ASSERT_TRUE(same_u16(shrink, want.shrink, p.R, c.spec.dtype, "shrink_out"));
    ASSERT_TRUE(same_rows(y, want.y, p.T, p.H, run.stride(), kCanary, "y"));
    if (i == 0) {
      const std::vector<double> oracle = reference::bgmv::oracle_y(c.problem(), true);
      const std::vector<double> got = compact_y(y, p.T, p.H, run.stride());
      EXPECT_EQ(testbed::fraction_within(got, oracle, 1e-2, 1e-2), 1.0)
          << "first oracle mismatch at " << testbed::first_mismatch(got, oracle, 1e-2, 1e-2);
      for (int64_t t = 0; t < p.T; ++t) {
        if (c.active(t)) {
          ASSERT_GT(bgmv_test::max_abs(y.data() + t * run.stride(), p.H), 0.1)
              << "vacuous reference row " << t;
        }
      }
    }
  }
  const std::vector<uint32_t> words = run.route_words();
  const int total = done + runs;
  EXPECT_EQ(words[0], static_cast<uint32_t>(total)) << "launch counter";
  EXPECT_EQ(words[1], static_cast<uint32_t>((total - 1) & 1)) << "parity word";
  const bgmv::RouteIndexLayout layout = bgmv::route_index_layout(p.T);
  for (int64_t w = layout.split_counters; w < layout.total_words; ++w) {
    ASSERT_EQ(words[w], 0u) << "split counter " << w - layout.split_counters << " not reset";
  }
}

/// A fresh device problem launched `runs` times.
void check_cake(const bgmv_test::Case& c, const LaunchConfig& cfg, int runs, const char* label) {
  CakeRun run(c, cfg);
  check_runs(run, c, cfg, runs, 0, label);
}

// ---- Route index layout -------------------------------------------------------------------------

TEST(BgmvKernelsGpu, RouteIndexLayoutMatchesDeviceOffsets) {
  // src/bgmv/route_index.cuh hard-codes these offsets; bgrun allocates with route_index_layout.
  for (int64_t t : {1, 7, 300}) {
    const bgmv::RouteIndexLayout l = bgmv::route_index_layout(t);
    EXPECT_EQ(l.count, 4);
    EXPECT_EQ(l.base_even, 4 + t);
    EXPECT_EQ(l.base_odd, 4 + 2 * t);
    EXPECT_EQ(l.slots, 4 + 3 * t);
    EXPECT_EQ(l.split_partials, 4 + 19 * t);
    EXPECT_EQ(l.split_counters, 4 + 19 * t + 8 * 128 * 64);
    EXPECT_EQ(l.total_words, 4 + 19 * t + 8 * 128 * 64 + 128 * 8);
  }
}

TEST(BgmvKernelsGpu, LaunchersRejectWhatNoUnitImplements) {
  // Checked on the host before any CUDA call, so no device is needed.
  CakeParams p;
  p.T = 4;
  p.H = 1024;
  p.P = 8;
  p.R = 12;
  EXPECT_THROW(launch_cake_shrink(p, nullptr), InvalidArgument);
  EXPECT_THROW(launch_cake_expand(p, nullptr), InvalidArgument);
  p.R = 32;
  p.shrink = static_cast<ShrinkKind>(6);  // past the kinds: no instance
  EXPECT_THROW(launch_cake_shrink(p, nullptr), Unsupported);
  p.shrink = static_cast<ShrinkKind>(-1);
  EXPECT_THROW(launch_cake_shrink(p, nullptr), Unsupported);
  p.shrink = ShrinkKind::kRegistersHalfBlock;  // half rank blocks: one split only
  p.splits = 2;
  EXPECT_THROW(launch_cake_shrink(p, nullptr), InvalidArgument);
  p.splits = 1;
  p.shrink = ShrinkKind::kRing2Stage;
  p.splits = 2;
  p.P = 129;  // the split-K region holds 128 pairs
  EXPECT_THROW(launch_cake_shrink(p, nullptr), InvalidArgument);
  p.schedule_id = 3;
  EXPECT_THROW(launch_cake_expand(p, nullptr), Unsupported);
  p.dtype = 2;
  EXPECT_THROW(launch_cake_shrink(p, nullptr), InvalidArgument);
  PortableParams q;
  q.R = 129;
  EXPECT_THROW(launch_portable(q, nullptr), InvalidArgument);
  q.R = 8;
  q.S = 9;
  EXPECT_THROW(launch_portable(q, nullptr), InvalidArgument);
}

// ---- §11.2 generic matrix -----------------------------------------------------------------------

struct MatrixCase {
  int64_t hidden, rank, tokens;
  DType dtype;
  bool arbitrary;
  int64_t top_k;
};

std::string matrix_name(const ::testing::TestParamInfo<MatrixCase>& info) {
  const MatrixCase& m = info.param;
  return "H" + std::to_string(m.hidden) + "_R" + std::to_string(m.rank) + "_T" +
         std::to_string(m.tokens) + (m.dtype == DType::kFP16 ? "_fp16" : "_bf16") +
         (m.arbitrary ? "_arb" : "_tm") + "_k" + std::to_string(m.top_k);
}

class BgmvGenericMatrix : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(BgmvGenericMatrix, BitwiseEqualToReferenceOverEightRuns) {
  CAKEMOE_REQUIRE_GPU();
  const MatrixCase& m = GetParam();
  CaseSpec spec;
  spec.dtype = m.dtype;
  spec.tokens = m.tokens;
  spec.hidden = m.hidden;
  spec.rank = m.rank;
  spec.experts = 32;
  spec.top_k = m.top_k;
  spec.order = m.arbitrary ? PairOrder::kSlotMajor : PairOrder::kTokenMajor;
  spec.seed = static_cast<uint64_t>(m.hidden * 131 + m.rank * 7 + m.tokens);
  bgmv_test::Case c = bgmv_test::make_case(spec);
  CakeRun run(c, LaunchConfig{});
  check_runs(run, c, LaunchConfig{}, 8, 0, "selected launch");
  if (HasFatalFailure()) return;
  // Later runs read the current contents of the same buffers: x *= 0.5, re-uploaded.
  for (uint16_t& v : c.x) {
    v = reference::bgmv::narrow(m.dtype, 0.5f * reference::bgmv::widen(m.dtype, v));
  }
  run.upload_x(c.x);
  check_runs(run, c, LaunchConfig{}, 2, 8, "x scaled by 0.5");
}

INSTANTIATE_TEST_SUITE_P(Spec11_2, BgmvGenericMatrix,
                         ::testing::Values(MatrixCase{3072, 16, 8, DType::kBF16, false, 2},
                                           MatrixCase{3072, 8, 40, DType::kFP16, false, 2},
                                           MatrixCase{3072, 64, 4, DType::kBF16, true, 2},
                                           MatrixCase{2048, 32, 32, DType::kFP16, false, 2},
                                           MatrixCase{736, 32, 16, DType::kBF16, false, 2},
                                           MatrixCase{1344, 32, 512, DType::kBF16, false, 2},
                                           MatrixCase{2880, 32, 1, DType::kFP16, false, 2},
                                           MatrixCase{2112, 64, 300, DType::kBF16, true, 2},
                                           MatrixCase{1472, 8, 64, DType::kFP16, true, 2},
                                           MatrixCase{4096, 32, 8, DType::kBF16, true, 4},
                                           MatrixCase{1856, 16, 96, DType::kFP16, true, 8},
                                           MatrixCase{2048, 8, 24, DType::kBF16, true, 20},
                                           MatrixCase{7168, 64, 16, DType::kFP16, false, 2},
                                           MatrixCase{7168, 8, 4, DType::kBF16, true, 2},
                                           MatrixCase{5888, 32, 4, DType::kBF16, false, 2},
                                           MatrixCase{4096, 32, 16, DType::kFP16, true, 2}),
                         matrix_name);

// ---- Launch variants ----------------------------------------------------------------------------

TEST(BgmvKernelsGpu, EveryFormSplitScheduleAndPdlModeIsBitwiseExact) {
  CAKEMOE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    CaseSpec spec;
    spec.dtype = dtype;
    spec.tokens = 6;
    spec.hidden = 3000;  // 3 tiles, the last one partial
    spec.rank = 32;
    spec.order = PairOrder::kSlotMajor;
    spec.seed = 5;
    const bgmv_test::Case c = bgmv_test::make_case(spec);
    for (int form : {0, 2, 3, 4, 5, 6}) {
      for (int splits : {1, 2, 3, 4}) {  // 4: the last split is empty
        if (form >= 5 && splits > 1) continue;  // forms 5 and 6 take one split
        for (int pdl : {0, 1, 2}) {
          LaunchConfig cfg;
          cfg.form = form;
          cfg.splits = splits;
          cfg.pdl = pdl;
          cfg.schedule = (splits + pdl) % 3;
          check_cake(c, cfg, 2, "forced launch");
        }
      }
    }
  }
}

// Form 3 takes 4 k tiles per register trip: 5 tiles (the last partial) are two trips, and a
// split of 3 tiles one short trip. Form 4 takes one tile per trip (5 trips, the last partial).
TEST(BgmvKernelsGpu, RegisterShrinkFormAcrossTripsIsBitwiseExact) {
  CAKEMOE_REQUIRE_GPU();
  for (int64_t rank : {8, 64}) {
    CaseSpec spec;
    spec.tokens = 3;
    spec.hidden = 5000;
    spec.rank = rank;
    spec.top_k = 3;
    spec.order = PairOrder::kSlotMajor;
    spec.seed = 17 + static_cast<uint64_t>(rank);
    const bgmv_test::Case c = bgmv_test::make_case(spec);
    for (int form : {3, 4, 5, 6}) {
      for (int splits : {1, 2}) {
        if (form >= 5 && splits > 1) continue;  // forms 5 and 6 take one split
        LaunchConfig cfg;
        cfg.form = form;
        cfg.splits = splits;
        cfg.pdl = 1;
        const std::string label =
            "register shrink form " + std::to_string(form) + " rank " + std::to_string(rank);
        check_cake(c, cfg, 2, label.c_str());
      }
    }
  }
}

TEST(BgmvKernelsGpu, OrderRemapIsBitwiseIdentity) {
  CAKEMOE_REQUIRE_GPU();
  for (int64_t tokens : {40, 300}) {  // P <= 128 with splits, and P > 128
    CaseSpec spec;
    spec.tokens = tokens;
    spec.hidden = 4096;
    spec.rank = 16;
    spec.order = PairOrder::kExpertSorted;
    spec.seed = 11 + static_cast<uint64_t>(tokens);
    const bgmv_test::Case c = bgmv_test::make_case(spec);
    LaunchConfig cfg;
    cfg.remap = true;
    cfg.form = 0;
    cfg.splits = tokens <= 64 ? 3 : 1;
    check_cake(c, cfg, 3, "remapped CTA order");
  }
}

TEST(BgmvKernelsGpu, ExpertSortedRoutes) {
  CAKEMOE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    CaseSpec spec;
    spec.dtype = dtype;
    spec.tokens = 64;
    spec.hidden = 1344;
    spec.rank = 16;
    spec.top_k = 4;
    spec.order = PairOrder::kExpertSorted;
    spec.seed = 21;
    check_cake(bgmv_test::make_case(spec), LaunchConfig{}, 4, "expert sorted");
  }
}

TEST(BgmvKernelsGpu, CapturedGraphReplaysAreBitwiseExact) {
  CAKEMOE_REQUIRE_GPU();
  // The plan captures shrink + expand (PDL edge, opt-in shared memory) into a CUDA graph.
  CaseSpec spec;
  spec.dtype = DType::kFP16;
  spec.tokens = 9;
  spec.hidden = 2560;
  spec.rank = 64;
  spec.top_k = 3;
  spec.order = PairOrder::kExpertSorted;
  spec.seed = 61;
  const bgmv_test::Case c = bgmv_test::make_case(spec);
  for (int pdl : {1, 2}) {
    LaunchConfig cfg;
    cfg.form = 2;
    cfg.splits = 3;
    cfg.pdl = pdl;
    CakeRun run(c, cfg);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(run.stream(), cudaStreamCaptureModeGlobal));
    run.launch();
    CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(run.stream(), &graph));
    CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const Expected want = expected(c, cfg.splits, run.stride(), kCanary);
    for (int i = 0; i < 8; ++i) {
      SCOPED_TRACE("pdl " + std::to_string(pdl) + " replay " + std::to_string(i));
      run.poison_outputs();
      CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, run.stream()));
      run.sync();
      ASSERT_TRUE(same_u16(run.shrink_out(), want.shrink, spec.rank, spec.dtype, "shrink_out"));
      ASSERT_TRUE(same_rows(run.y(), want.y, spec.tokens, spec.hidden, run.stride(), kCanary, "y"));
    }
    EXPECT_EQ(run.route_words()[0], 8u) << "launch counter after 8 replays";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// ---- Route-index corner cases -------------------------------------------------------------------

TEST(BgmvKernelsGpu, PaddingPairsNoLoraTokensAndExtraRoutes) {
  CAKEMOE_REQUIRE_GPU();
  CaseSpec spec;
  spec.tokens = 16;
  spec.hidden = 2048;
  spec.rank = 32;
  spec.seed = 31;
  bgmv_test::Case c = bgmv_test::make_case(spec);
  ASSERT_EQ(c.lora_indices[0], -1);
  int64_t t = 1;
  while (c.lora_indices[t] < 0) ++t;
  c.add_pair(-1, 0, 0.0f);                    // padding below
  c.add_pair(t, c.expert_ids[2 * t], 0.25f);  // an extra route for a LoRA token
  c.add_pair(spec.tokens, 0, 0.0f);           // padding above
  c.add_pair(0, 0, 0.25f);                    // an extra route for the no-LoRA token 0
  check_cake(c, LaunchConfig{}, 8, "padding + extra routes");
}

TEST(BgmvKernelsGpu, ContiguousLayoutWithARouteElsewhere) {
  CAKEMOE_REQUIRE_GPU();
  // P == 2T and token 2 sits at 4, 5 (implicit) but also owns pair 2T-1 (published): the
  // contiguous fast path must not drop it; token T-1 keeps only its implicit pair 2T-2.
  CaseSpec spec;
  spec.tokens = 12;
  spec.hidden = 1024;
  spec.rank = 8;
  spec.seed = 41;
  spec.nan_unused_blocks = false;
  bgmv_test::Case c = bgmv_test::make_case(spec);
  c.lora_indices[2] = 1;
  c.sorted_token_ids[2 * spec.tokens - 1] = 2;
  check_cake(c, LaunchConfig{}, 8, "contiguous + published route");
}

TEST(BgmvKernelsGpu, MoreThanSixteenRoutesUseTheSerialScan) {
  CAKEMOE_REQUIRE_GPU();
  // Token 3 gets 152 routes spread over several 64-pair scan chunks (and 32-route batches).
  CaseSpec spec;
  spec.tokens = 5;
  spec.hidden = 800;
  spec.rank = 64;
  spec.top_k = 2;
  spec.experts = 8;
  spec.seed = 51;
  spec.nan_unused_blocks = false;
  bgmv_test::Case c = bgmv_test::make_case(spec);
  c.lora_indices[3] = 0;
  for (int i = 0; i < 150; ++i) c.add_pair(3, i % spec.experts, 0.01f * static_cast<float>(i % 7));
  check_cake(c, LaunchConfig{}, 8, "serial scan");
}

// ---- Portable fallback --------------------------------------------------------------------------

struct PortableCase {
  DType dtype;
  int64_t tokens, hidden, rank, feat_out, slices, top_k;
};

void check_portable(const PortableCase& pc) {
  SCOPED_TRACE("portable T=" + std::to_string(pc.tokens) + " H=" + std::to_string(pc.hidden) +
               " R=" + std::to_string(pc.rank) + " F=" + std::to_string(pc.feat_out) +
               " S=" + std::to_string(pc.slices) + " k=" + std::to_string(pc.top_k));
  CaseSpec spec;
  spec.dtype = pc.dtype;
  spec.tokens = pc.tokens;
  spec.hidden = pc.hidden;
  spec.rank = pc.rank;
  spec.feat_out = pc.feat_out;
  spec.slices = pc.slices;
  spec.top_k = pc.top_k;
  spec.order = PairOrder::kSlotMajor;
  spec.seed = static_cast<uint64_t>(pc.hidden + pc.rank);
  bgmv_test::Case c = bgmv_test::make_case(spec);
  c.add_pair(-1, 0, 0.0f);
  const int64_t s_n = pc.slices, p_n = c.num_pairs(), f = pc.feat_out;
  const int64_t width = s_n * f;
  DeviceBuffer<uint16_t> x(c.x);
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> a, b;
  DeviceBuffer<int64_t> tokens(c.sorted_token_ids), experts(c.expert_ids), loras(c.lora_indices);
  DeviceBuffer<float> weights(c.topk_weights);
  DeviceBuffer<uint16_t> shrink(static_cast<size_t>(s_n * p_n * pc.rank));
  DeviceBuffer<float> y(static_cast<size_t>(pc.tokens * width));
  PortableParams p;
  p.dtype = pc.dtype == DType::kFP16 ? 1 : 0;
  p.S = static_cast<int>(s_n);
  p.x = x.get();
  for (int64_t s = 0; s < s_n; ++s) {
    a.push_back(std::make_unique<DeviceBuffer<uint16_t>>(c.lora_a[s]));
    b.push_back(std::make_unique<DeviceBuffer<uint16_t>>(c.lora_b[s]));
    p.lora_a[s] = a.back()->get();
    p.lora_b[s] = b.back()->get();
  }
  p.sorted_token_ids = tokens.get();
  p.expert_ids = experts.get();
  p.lora_indices = loras.get();
  p.topk_weights = weights.get();
  p.shrink_out = shrink.get();
  p.y = y.get();
  p.T = pc.tokens;
  p.H = pc.hidden;
  p.F = f;
  p.R = pc.rank;
  p.P = p_n;
  p.L = spec.loras;
  p.E = spec.experts;
  const reference::bgmv::Problem problem = c.problem();
  std::vector<uint16_t> want_shrink(static_cast<size_t>(s_n * p_n * pc.rank));
  std::vector<float> want_y(static_cast<size_t>(pc.tokens * width));
  reference::bgmv::run(problem, {}, want_shrink.data(), want_y.data(), width);
  const std::vector<double> oracle = reference::bgmv::oracle_y(problem, true);
  const std::vector<double> want(want_y.begin(), want_y.end());
  // Runs 0 and 1 launch directly; runs 2 and 3 replay a captured graph (memsets included).
  cudaStream_t stream = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  launch_portable(p, stream);
  CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("run " + std::to_string(i));
    shrink.fill(0xFF);  // launch_portable must zero both outputs itself
    y.fill(0xFF);
    if (i < 2) {
      launch_portable(p, stream);
    } else {
      CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    }
    CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    // The shrink follows the canonical order with one split: bitwise equal.
    ASSERT_TRUE(same_u16(shrink.download(), want_shrink, pc.rank, pc.dtype, "portable shrink"));
    const std::vector<float> got_f = y.download();
    const std::vector<double> got(got_f.begin(), got_f.end());
    const double rel = testbed::relative_frobenius(got, want);
    EXPECT_LE(rel, 1e-5) << "relative Frobenius error vs the canonical reference";
    EXPECT_EQ(testbed::fraction_within(got, want, 1e-5, 1e-5), 1.0)
        << "first mismatch vs reference at " << testbed::first_mismatch(got, want, 1e-5, 1e-5);
    EXPECT_EQ(testbed::fraction_within(got, oracle, 1e-2, 1e-2), 1.0)
        << "first mismatch vs oracle at " << testbed::first_mismatch(got, oracle, 1e-2, 1e-2);
    for (int64_t t = 0; t < pc.tokens; ++t) {
      if (!c.active(t)) {
        for (int64_t col = 0; col < width; ++col) {
          ASSERT_EQ(float_to_bits(got_f[t * width + col]), 0u) << "inactive token " << t;
        }
      } else {
        ASSERT_GT(bgmv_test::max_abs(want_y.data() + t * width, width), 0.1);
      }
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(BgmvKernelsGpu, PortableTwoSlicesRank12Hidden2052) {
  CAKEMOE_REQUIRE_GPU();
  check_portable({DType::kFP16, 8, 2052, 12, 1000, 2, 2});
  check_portable({DType::kBF16, 5, 2052, 12, 2052, 2, 3});
}

TEST(BgmvKernelsGpu, PortableSpecFallbackShapes) {
  CAKEMOE_REQUIRE_GPU();
  check_portable({DType::kFP16, 4, 3072, 16, 3072, 2, 2});
  check_portable({DType::kBF16, 40, 2048, 16, 2048, 2, 2});
  check_portable({DType::kBF16, 3, 77, 128, 130, 1, 1});
  check_portable({DType::kFP16, 9, 1030, 5, 33, 3, 4});
}

// ---- Lane-cooperative expand (R/8 lanes per column, batched routes, pre-wait route scan) -------

/// One Cake problem over several forced expand schedules and PDL modes (fresh route index each).
/// Every schedule (narrow, wide, decode) x every PDL mode; the launcher stages the contiguous pair
/// before the wait where it applies (P > 256, P == 2T; the wide schedule), else the route index.
void check_expand_variants(bgmv_test::Case& c, int runs, const char* label) {
  for (int schedule : {0, 1, 2}) {
    for (int pdl : {0, 1, 2}) {
      LaunchConfig cfg;
      cfg.schedule = schedule;
      cfg.pdl = pdl;
      SCOPED_TRACE(std::string(label) + " k=" + std::to_string(c.spec.top_k));
      check_cake(c, cfg, runs, "forced schedule / pdl");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

/// One expand test row: shape, dtype and pair order of a generated case.
struct ExpandRow {
  int64_t hidden, rank, tokens, top_k;
  DType dtype;
  PairOrder order;
};

bgmv_test::Case make_row_case(const ExpandRow& r, int64_t experts, uint64_t seed) {
  CaseSpec spec;
  spec.dtype = r.dtype;
  spec.tokens = r.tokens;
  spec.hidden = r.hidden;
  spec.rank = r.rank;
  spec.experts = experts;
  spec.top_k = r.top_k;
  spec.order = r.order;
  spec.seed = seed;
  return bgmv_test::make_case(spec);
}

TEST(BgmvKernelsGpu, ExpandLaneLayoutLargeTopKSmallTokens) {
  CAKEMOE_REQUIRE_GPU();
  // k 6 / 8 at T 1..32, rank 64 and 32 (and 16 / 8 once), both dtypes, H with and without a
  // column tail for every CTA width (3000 = 8 * 375: tails for 16, 32, 64 and 128 columns).
  const ExpandRow rows[] = {
      {3072, 64, 1, 8, DType::kBF16, PairOrder::kTokenMajor},
      {3000, 64, 2, 6, DType::kFP16, PairOrder::kSlotMajor},
      {3072, 64, 8, 8, DType::kFP16, PairOrder::kExpertSorted},
      {3000, 64, 8, 6, DType::kBF16, PairOrder::kTokenMajor},
      {1000, 64, 9, 8, DType::kBF16, PairOrder::kSlotMajor},
      {3072, 64, 16, 6, DType::kFP16, PairOrder::kExpertSorted},
      {2048, 64, 32, 8, DType::kBF16, PairOrder::kSlotMajor},  // P 256: the scan limit
      {3000, 32, 1, 6, DType::kFP16, PairOrder::kTokenMajor},
      {3072, 32, 5, 8, DType::kBF16, PairOrder::kExpertSorted},
      {3000, 32, 24, 8, DType::kFP16, PairOrder::kSlotMajor},
      {3000, 16, 7, 7, DType::kBF16, PairOrder::kSlotMajor},  // k odd: a partial batch
      {1000, 8, 6, 5, DType::kFP16, PairOrder::kExpertSorted},
      {3000, 16, 3, 13, DType::kBF16, PairOrder::kSlotMajor},  // k > 8: four batches and more
      {1000, 64, 3, 12, DType::kFP16, PairOrder::kTokenMajor},
  };
  for (const ExpandRow& r : rows) {
    bgmv_test::Case c = make_row_case(
        r, 32, static_cast<uint64_t>(r.hidden + 17 * r.rank + 5 * r.tokens + r.top_k));
    SCOPED_TRACE("H=" + std::to_string(r.hidden) + " R=" + std::to_string(r.rank) +
                 " T=" + std::to_string(r.tokens));
    check_expand_variants(c, 2, "lane layout");
    if (HasFatalFailure()) return;
  }
}

TEST(BgmvKernelsGpu, DecodeScheduleIsBitwiseExact) {
  CAKEMOE_REQUIRE_GPU();
  // Schedule 2 (8 routes per batch, one slot per thread) where SM90 plans take it and at its
  // edges: fewer routes than a batch, more than one batch (k 13), column tails of its 16- to
  // 128-column CTAs, every PDL mode. Small enough for the sanitizers.
  const ExpandRow rows[] = {
      {3000, 16, 1, 8, DType::kBF16, PairOrder::kTokenMajor},
      {1000, 32, 4, 8, DType::kFP16, PairOrder::kSlotMajor},
      {3000, 64, 1, 6, DType::kBF16, PairOrder::kExpertSorted},
      {1000, 8, 3, 13, DType::kFP16, PairOrder::kSlotMajor},
      {1000, 32, 2, 3, DType::kBF16, PairOrder::kTokenMajor},
  };
  for (const ExpandRow& r : rows) {
    const bgmv_test::Case c =
        make_row_case(r, 16, static_cast<uint64_t>(900 + r.rank + 7 * r.tokens + r.top_k));
    for (int pdl : {0, 1, 2}) {
      LaunchConfig cfg;
      cfg.schedule = 2;
      cfg.pdl = pdl;
      SCOPED_TRACE("decode schedule R=" + std::to_string(r.rank) + " T=" +
                   std::to_string(r.tokens) + " k=" + std::to_string(r.top_k));
      check_cake(c, cfg, 2, "decode schedule");
      if (HasFatalFailure()) return;
    }
  }
}

TEST(BgmvKernelsGpu, ExpandPrewaitScanLimitBothSides) {
  CAKEMOE_REQUIRE_GPU();
  // P == 256 finds the routes by a pre-wait scan; P == 257 (one padding pair more) goes through
  // the route index (8 published routes per token, the indexed list).
  for (bool above : {false, true}) {
    CaseSpec spec;
    spec.dtype = above ? DType::kFP16 : DType::kBF16;
    spec.tokens = 32;
    spec.hidden = 3000;
    spec.rank = 64;
    spec.experts = 32;
    spec.top_k = 8;
    spec.order = PairOrder::kExpertSorted;
    spec.seed = above ? 257 : 256;
    bgmv_test::Case c = bgmv_test::make_case(spec);
    if (above) c.add_pair(-1, 0, 0.0f);
    ASSERT_EQ(c.num_pairs(), above ? 257 : 256);
    check_expand_variants(c, 3, above ? "P 257" : "P 256");
    if (HasFatalFailure()) return;
  }
  // Contiguous top-2: P == 256 (scan) and P == 258 (implicit pairs 2t, 2t+1, nothing published).
  for (int64_t tokens : {128, 129}) {
    CaseSpec spec;
    spec.tokens = tokens;
    spec.hidden = 1000;
    spec.rank = 32;
    spec.seed = 300 + static_cast<uint64_t>(tokens);
    bgmv_test::Case c = bgmv_test::make_case(spec);
    check_expand_variants(c, 3, "contiguous top-2");
    if (HasFatalFailure()) return;
  }
}

TEST(BgmvKernelsGpu, ContiguousLayoutAboveScanLimitWithARouteElsewhere) {
  CAKEMOE_REQUIRE_GPU();
  // As ContiguousLayoutWithARouteElsewhere, but P = 280 > 256: the route index path (implicit
  // 2t, 2t+1 plus one published pair 2T-1, sorted) with the contiguous L2 prefetch.
  CaseSpec spec;
  spec.tokens = 140;
  spec.hidden = 1024;
  spec.rank = 64;
  spec.seed = 43;
  spec.nan_unused_blocks = false;
  bgmv_test::Case c = bgmv_test::make_case(spec);
  c.lora_indices[2] = 1;
  c.sorted_token_ids[2 * spec.tokens - 1] = 2;
  check_expand_variants(c, 4, "contiguous + published route, P 280");
}

// The contiguous pair staged before the wait (kPrewaitPair, P > 256, P == 2T) gives the bits of
// the route-index path, also where a token owns a published route besides its implicit pair (the
// staged list is then dropped), where a token has no LoRA and where a pair is padding.
TEST(BgmvKernelsGpu, StagedContiguousPairIsBitwiseExact) {
  CAKEMOE_REQUIRE_GPU();
  for (int64_t rank : {16, 64}) {
    CaseSpec spec;
    spec.tokens = 140;  // P 280 > 256: the route-index path
    spec.hidden = 1000;
    spec.rank = rank;
    spec.seed = 44 + static_cast<uint64_t>(rank);
    spec.nan_unused_blocks = false;
    bgmv_test::Case c = bgmv_test::make_case(spec);
    c.lora_indices[2] = 1;
    c.lora_indices[5] = -1;
    c.sorted_token_ids[2 * spec.tokens - 1] = 2;  // token 2 also owns the last pair
    c.sorted_token_ids[9] = -1;                   // token 4 keeps only pair 8
    check_expand_variants(c, 4, rank == 16 ? "staged pair r16" : "staged pair r64");
    if (HasFatalFailure()) return;
  }
}

TEST(BgmvKernelsGpu, SerialScanAcrossChunksAboveScanLimit) {
  CAKEMOE_REQUIRE_GPU();
  // Token 3 owns 2 + 300 routes in P = 316 pairs: more than 16 published, so the chunked serial
  // scan (256 pairs a chunk); its routes straddle the chunk boundary, batches end mid-chunk.
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    CaseSpec spec;
    spec.dtype = dtype;
    spec.tokens = 8;
    spec.hidden = 1000;
    spec.rank = 16;
    spec.experts = 8;
    spec.order = PairOrder::kSlotMajor;
    spec.seed = 71;
    spec.nan_unused_blocks = false;
    bgmv_test::Case c = bgmv_test::make_case(spec);
    c.lora_indices[3] = 1;
    for (int i = 0; i < 300; ++i) {
      c.add_pair(3, i % spec.experts, 0.01f * static_cast<float>(i % 5));
    }
    ASSERT_EQ(c.num_pairs(), 316);
    check_expand_variants(c, 2, "serial scan, two chunks");
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace bgmv_gpu_test
}  // namespace cakemoe
