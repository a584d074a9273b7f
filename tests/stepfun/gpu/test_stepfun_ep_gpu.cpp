// The StepFun EP layer over NCCL. One GPU: a single-rank communicator (ncclCommInitAll with one
// device) must give exactly the plain layer's bits, eagerly and replayed from a CUDA graph, in
// both schemes. Two or more GPUs (one thread per rank): the combined output passes the family's
// check against the fp64 oracle, stays close to the single-GPU layer on the same inputs (also for
// tokens whose experts are all remote, ranks that receive nothing and T = 1) and is bitwise stable
// across launches and graph replays. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cakemoe/stepfun_ep.h"
#include "core/cuda_util.h"
#include "formats/codecs.h"
#include "reference/stepfun/harness.h"
#include "stepfun/ep_world_sim.h"
#include "reference/stepfun/families.h"
#include "stepfun/gpu/stepfun_gpu_case.h"
#include "testbed/gpu/gpu_testbed.h"

#if defined(CAKEMOE_WITH_NCCL)
#include <nccl.h>
#endif

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {
namespace ref = reference::stepfun;
namespace gt = gpu_testbed;

#if defined(CAKEMOE_WITH_NCCL)

/// Communicators of devices 0..n-1 in this process (rank r on device r).
struct Comms {
  std::vector<ncclComm_t> comms;
  explicit Comms(int n) : comms(n) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off on the shared machines
    std::vector<int> devices(n);
    for (int i = 0; i < n; ++i) devices[i] = i;
    if (ncclCommInitAll(comms.data(), n, devices.data()) != ncclSuccess) comms.clear();
  }
  ~Comms() {
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
};

ref::LayerCase ep_case(Family f, int64_t tokens, bool precomputed, int64_t experts = 16) {
  ref::LayerCase c;
  c.family = f;
  c.num_tokens = tokens;
  c.hidden = 512;
  c.intermediate = 256;
  c.num_experts = experts;
  c.top_k = 4;
  c.precomputed = precomputed;
  c.regime = ref::RoutingRegime::kRandperm;
  return c;
}

/// A copy of the host view on cuda:`device`, kept alive by `pool`.
TensorView on_device(const TensorView& host, int device, std::vector<Tensor>* pool) {
  if (!host.defined()) return TensorView();
  pool->push_back(core::copy_to(host, Device::cuda(device)));
  return pool->back();
}

/// Rank r's arguments: its rows of the host case and its expert slice, on cuda:r.
EpArgs rank_args(const MoeArgs& host, const ExpertPartition& partition,
                 const std::vector<int64_t>& tokens, int r, Scheme scheme, void* comm,
                 std::vector<Tensor>* pool) {
  int64_t start = 0;
  for (int i = 0; i < r; ++i) start += tokens[i];
  const int64_t t = tokens[r], off = partition.offsets[r];
  const int64_t n = partition.offsets[r + 1] - off;
  EpArgs a;
  a.comm = comm;
  a.scheme = scheme;
  a.layer = host;
  MoeArgs& m = a.layer;
  for (TensorView* v : {&m.hidden_states, &m.hidden_states_scale, &m.per_token_scale,
                        &m.routing_logits, &m.topk_ids, &m.topk_weights}) {
    *v = on_device(sim::row_slice(*v, start, t), r, pool);
  }
  for (TensorView* w :
       {&m.gemm1_weights, &m.gemm1_weights_scale, &m.gemm2_weights, &m.gemm2_weights_scale,
        &m.output1_scale_scalar, &m.output1_scale_gate_scalar, &m.output2_scale_scalar,
        &m.gemm1_clamp_limit}) {
    *w = on_device(sim::row_slice(*w, off, n), r, pool);
  }
  m.local_expert_offset = off;
  m.local_num_experts = n;
  return a;
}

/// Captures `launch` on `stream` (thread-local mode: other ranks capture at the same time),
/// replays it `replays` times and waits.
void replay_graph(const EpLaunch& launch, cudaStream_t stream, int replays) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launch.launch(stream);
  CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < replays; ++i) CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  CAKEMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  CAKEMOE_CUDA_CHECK(cudaGraphDestroy(graph));
}

/// Runs the EP layer on `world` GPUs (a thread per rank): eager launch, a second launch and
/// graph replays must agree bit for bit; returns the ranks' outputs concatenated (bf16 [T, H]).
std::vector<uint16_t> run_ep(const MoeArgs& host, const std::vector<int64_t>& tokens, Scheme scheme,
                             const Comms& comms) {
  const int world = static_cast<int>(tokens.size());
  const ExpertPartition partition = even_partition(host.num_experts, world);
  std::vector<std::vector<uint16_t>> outputs(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        CAKEMOE_CUDA_CHECK(cudaSetDevice(r));
        std::vector<Tensor> pool;
        const EpArgs args = rank_args(host, partition, tokens, r, scheme, comms.comms[r], &pool);
        const EpLaunch launch = prepare(args);
        cudaStream_t stream = nullptr;
        CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        launch.launch(stream);
        CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        const Tensor first = gt::to_host(launch.output());
        core::fill_bytes(launch.output(), 0xFF, stream);
        launch.launch(stream);
        CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        const Tensor second = gt::to_host(launch.output());
        core::fill_bytes(launch.output(), 0xFF, stream);
        replay_graph(launch, stream, 2);
        const Tensor replayed = gt::to_host(launch.output());
        CAKEMOE_CUDA_CHECK(cudaStreamDestroy(stream));
        if (std::memcmp(first.data(), second.data(), first.nbytes()) != 0 ||
            std::memcmp(first.data(), replayed.data(), first.nbytes()) != 0) {
          errors[r] = "output differs across launches / graph replays";
        }
        const uint16_t* p = first.ptr<uint16_t>();
        outputs[r].assign(p, p + first.numel());
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<uint16_t> all;
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    all.insert(all.end(), outputs[r].begin(), outputs[r].end());
  }
  return all;
}

/// The plain layer with every expert on GPU 0 (and the plan it ran).
std::vector<uint16_t> run_plain(const MoeArgs& host, Plan* plan = nullptr) {
  CAKEMOE_CUDA_CHECK(cudaSetDevice(0));
  gt::DevicePool pool;
  const StepFunMoeLaunch launch = prepare_stepfun_moe(gt::device_args(host, pool));
  launch.launch();
  core::cuda_stream_sync(nullptr);
  if (plan != nullptr) *plan = launch.plan();
  const Tensor out = gt::to_host(launch.outputs()[0]);
  return std::vector<uint16_t>(out.ptr<uint16_t>(), out.ptr<uint16_t>() + out.numel());
}

// ---- One GPU
// --------------------------------------------------------------------------------------

struct SingleParam {
  Family family;
  bool precomputed;
  Scheme scheme;
};

class EpSingleRank : public ::testing::TestWithParam<SingleParam> {};

TEST_P(EpSingleRank, EqualsThePlainLayerBitForBit) {
  CAKEMOE_REQUIRE_GPU();
  const SingleParam p = GetParam();
  const Comms comms(1);
  ASSERT_EQ(comms.comms.size(), 1u) << "ncclCommInitAll failed";
  for (const int64_t tokens : {1, 24, 300}) {
    const ref::LayerData data = ref::make_layer(ep_case(p.family, tokens, p.precomputed));
    const MoeArgs host = ref::layer_args(data);
    const std::vector<uint16_t> plain = run_plain(host);
    const std::vector<uint16_t> ep = run_ep(host, {tokens}, p.scheme, comms);
    ASSERT_EQ(ep.size(), plain.size());
    EXPECT_TRUE(gt::diff_bytes(ep.data(), plain.data(), plain.size() * 2, 2).empty())
        << "T " << tokens << ": " << gt::diff_bytes(ep.data(), plain.data(), plain.size() * 2, 2);
  }
}

std::vector<SingleParam> single_params() {
  std::vector<SingleParam> v;
  for (Family f : kAllFamilies) {
    v.push_back({f, false, Scheme::kAllToAll});
    v.push_back({f, true, Scheme::kAllGather});
  }
  v.push_back({Family::kNVFP4, true, Scheme::kAllToAll});
  v.push_back({Family::kNVFP4, false, Scheme::kAllGather});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Families, EpSingleRank, ::testing::ValuesIn(single_params()),
                         [](const auto& info) {
                           return std::string(family_name(info.param.family)) +
                                  (info.param.precomputed ? "_ids_" : "_logits_") +
                                  scheme_name(info.param.scheme);
                         });

// ---- Two or more GPUs
// ------------------------------------------------------------------------------

/// The family's acceptance check of `out` against `reference` (another bf16 output) instead of
/// the oracle.
ref::LayerCheck check_against(ref::LayerData data, const std::vector<uint16_t>& reference,
                              const std::vector<uint16_t>& out) {
  for (size_t i = 0; i < reference.size(); ++i) {
    data.oracle_output[i] = formats::bf16_to_float(reference[i]);
  }
  return ref::check_layer_output(data, out.data());
}

class EpMultiRank : public ::testing::TestWithParam<Scheme> {
 protected:
  void SetUp() override {
    const int n = core::cuda_device_count();
    if (n < 2) GTEST_SKIP() << n << " GPU(s) visible: the multi-rank EP tests need >= 2";
    worlds_ = {2};
    if (n >= 4) worlds_.push_back(4);
    if (n >= 8) worlds_.push_back(8);
  }
  std::vector<int> worlds_;
};

TEST_P(EpMultiRank, PassesTheOracleCheckAndStaysCloseToOneGpu) {
  for (const int world : worlds_) {
    const Comms comms(world);
    ASSERT_EQ(comms.comms.size(), static_cast<size_t>(world)) << "ncclCommInitAll failed";
    std::vector<int64_t> tokens(world, 40);
    tokens[world - 1] = 1;  // unequal T, and T = 1
    int64_t total = 0;
    for (int64_t t : tokens) total += t;
    for (const Family f : {Family::kNVFP4, Family::kBF16}) {
      const ref::LayerData data = ref::make_layer(ep_case(f, total, false));
      const MoeArgs host = ref::layer_args(data);
      const std::vector<uint16_t> ep = run_ep(host, tokens, GetParam(), comms);
      ASSERT_EQ(ep.size(), static_cast<size_t>(total * 512));
      const ref::LayerCheck oracle = ref::check_layer_output(data, ep.data());
      EXPECT_TRUE(oracle.pass) << "EP " << world << " " << family_name(f) << ": "
                               << oracle.summary();
      const ref::LayerCheck plain = check_against(data, run_plain(host), ep);
      EXPECT_TRUE(plain.pass) << "EP " << world << " vs one GPU: " << plain.summary();
    }
  }
}

TEST_P(EpMultiRank, RemoteOnlyTokensAndRanksThatReceiveNothing) {
  for (const int world : worlds_) {
    const Comms comms(world);
    ASSERT_EQ(comms.comms.size(), static_cast<size_t>(world)) << "ncclCommInitAll failed";
    std::vector<int64_t> tokens(world, 16);
    tokens[0] = 1;
    int64_t total = 0;
    for (int64_t t : tokens) total += t;
    // Four experts per rank, so the last rank alone can hold K = 4 distinct experts per token.
    const int64_t experts = 4 * world;
    ref::LayerData data = ref::make_layer(ep_case(Family::kNVFP4, total, true, experts));
    // Every token routes to the last rank's experts only: ranks 0..world-2 receive nothing and
    // their own tokens are all remote.
    const ExpertPartition partition = even_partition(experts, world);
    const int64_t off = partition.offsets[world - 1];
    const int64_t n = partition.offsets[world] - off;
    int32_t* ids = data.topk_ids.ptr<int32_t>();
    for (int64_t t = 0; t < total; ++t) {
      for (int64_t k = 0; k < 4; ++k) ids[t * 4 + k] = static_cast<int32_t>(off + (t + k) % n);
    }
    MoeArgs host = ref::layer_args(data);
    Plan plan;
    const std::vector<uint16_t> plain = run_plain(host, &plan);
    // One rank holds every expert of every token: with the single-GPU plan its tables and
    // partials are the single-GPU layer's, and adding the other ranks' nothing keeps the bits.
    host.plan = plan;
    const std::vector<uint16_t> ep = run_ep(host, tokens, GetParam(), comms);
    EXPECT_TRUE(gt::diff_bytes(ep.data(), plain.data(), plain.size() * 2, 2).empty())
        << "EP " << world << ": " << gt::diff_bytes(ep.data(), plain.data(), plain.size() * 2, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, EpMultiRank,
                         ::testing::Values(Scheme::kAllToAll, Scheme::kAllGather),
                         [](const auto& info) { return std::string(scheme_name(info.param)); });

#else

TEST(EpGpu, BuiltWithoutNccl) {
  GTEST_SKIP() << "this build has no NCCL: the EP layer is not compiled (CAKEMOE_WITH_NCCL)";
}

#endif

}  // namespace
}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
