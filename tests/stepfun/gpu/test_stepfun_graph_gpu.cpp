// StepFunMoeLaunch::launch() is CUDA-graph capturable (spec §9.2): captured with
// cudaStreamCaptureModeGlobal (any allocation or host synchronisation inside launch() makes the
// capture fail), replayed, and bitwise equal to the eager launch; free device memory does not move
// across launches. A negative control proves the capture check catches an allocation and a sync.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "testbed/gpu/gpu_testbed.h"
#include "stepfun/gpu/stepfun_gpu_case.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;
namespace gt = gpu_testbed;

/// Captures `body(stream)` into a graph with the global capture mode. Returns "" and the graph on
/// success, else why the capture failed (the capture is always ended and errors cleared).
std::string capture(cudaStream_t stream, const std::function<void(cudaStream_t)>& body,
                    cudaGraph_t* graph) {
  *graph = nullptr;
  cudaError_t status = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  if (status != cudaSuccess) return std::string("BeginCapture: ") + cudaGetErrorString(status);
  std::string error;
  try {
    body(stream);
  } catch (const Error& e) {
    error = std::string("launch threw: ") + e.what();
  }
  status = cudaStreamEndCapture(stream, graph);
  if (status != cudaSuccess && error.empty()) {
    error = std::string("EndCapture: ") + cudaGetErrorString(status);
  }
  const cudaError_t sticky = cudaGetLastError();
  if (sticky != cudaSuccess && error.empty()) {
    error = std::string("during capture: ") + cudaGetErrorString(sticky);
  }
  if (!error.empty() && *graph != nullptr) {
    cudaGraphDestroy(*graph);
    *graph = nullptr;
  }
  return error;
}

#define CUDA_OK(call)                                                       \
  do {                                                                      \
    const cudaError_t status_ = (call);                                     \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_); \
  } while (0)

ref::LayerCase graph_case(Family f, int64_t tokens) {
  ref::LayerCase c;
  c.family = f;
  c.num_tokens = tokens;
  c.hidden = 512;
  c.intermediate = 256;
  c.num_experts = 16;
  c.top_k = 4;
  c.regime = ref::RoutingRegime::kRandperm;
  return c;
}

class StepFunGraphSmall : public ::testing::TestWithParam<Family> {};

TEST_P(StepFunGraphSmall, CapturedReplayEqualsEagerBitwise) {
  CAKEMOE_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int64_t tokens : {7, 300}) {
    for (bool do_finalize : {true, false}) {
      const ref::LayerData d = ref::make_layer(graph_case(GetParam(), tokens));
      SCOPED_TRACE(d.config.describe() + (do_finalize ? " finalize" : " do_finalize=false"));
      gt::DevicePool pool;
      MoeArgs args = gt::device_args(ref::layer_args(d), pool);
      args.do_finalize = do_finalize;
      const StepFunMoeLaunch launch = prepare_stepfun_moe(args);

      gt::poison_outputs(launch, stream);
      launch.launch(stream);
      core::cuda_stream_sync(stream);
      const std::vector<Tensor> eager = gt::host_outputs(launch);

      cudaGraph_t graph = nullptr;
      const std::string why = capture(stream, [&](cudaStream_t s) { launch.launch(s); }, &graph);
      ASSERT_EQ(why, "") << "launch() is not capturable (it allocates or synchronises?)";
      cudaGraphExec_t exec = nullptr;
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (int replay = 0; replay < 3; ++replay) {
        gt::poison_outputs(launch, stream);
        CUDA_OK(cudaGraphLaunch(exec, stream));
        core::cuda_stream_sync(stream);
        const std::vector<Tensor> replayed = gt::host_outputs(launch);
        ASSERT_EQ(replayed.size(), eager.size());
        // gemm2_output (do_finalize=false) has padding rows no stage writes: compare the rows the
        // tables point at; every other output is fully defined.
        const size_t first = do_finalize ? 0 : 1;
        for (size_t i = first; i < eager.size(); ++i) {
          EXPECT_EQ(gt::diff_bytes(replayed[i].data(), eager[i].data(), eager[i].nbytes(),
                                   dtype_size(eager[i].dtype())),
                    "")
              << "output " << i << ", replay " << replay;
        }
        if (!do_finalize) {
          const int32_t* e2p = eager[2].ptr<int32_t>();
          const int64_t h = d.config.hidden;
          for (int64_t p = 0; p < eager[2].numel(); ++p) {
            if (e2p[p] < 0) continue;
            ASSERT_EQ(gt::diff_bytes(replayed[0].ptr<uint16_t>() + e2p[p] * h,
                                     eager[0].ptr<uint16_t>() + e2p[p] * h, h * 2, 2),
                      "")
                << "gemm2_output row " << e2p[p] << ", replay " << replay;
          }
        }
      }
      if (do_finalize) {
        const ref::LayerCheck check = ref::check_layer_output(d, eager[0].ptr<uint16_t>());
        EXPECT_TRUE(check.pass) << check.summary();
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  }
  cudaStreamDestroy(stream);
}

TEST_P(StepFunGraphSmall, LaunchNeitherAllocatesNorSynchronises) {
  CAKEMOE_REQUIRE_GPU();
  const ref::LayerData d = ref::make_layer(graph_case(GetParam(), 300));
  gt::DevicePool pool;
  const StepFunMoeLaunch launch = prepare_stepfun_moe(gt::device_args(ref::layer_args(d), pool));
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch.launch(stream);  // first launch: lazy module loading happens outside the measurement
  core::cuda_stream_sync(stream);
  size_t free_before = 0, free_after = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  for (int i = 0; i < 10; ++i) launch.launch(stream);
  core::cuda_stream_sync(stream);
  CUDA_OK(cudaMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_before, free_after) << "device memory changed across 10 launches";
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(capture(stream, [&](cudaStream_t s) { launch.launch(s); }, &graph), "");
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, StepFunGraphSmall, ::testing::ValuesIn(kAllFamilies),
                         [](const auto& info) { return std::string(family_name(info.param)); });

// The check above can fail: a body that allocates, or one that synchronises, breaks the capture.
TEST(StepFunGraphSmallControl, CaptureDetectsAllocationAndSync) {
  CAKEMOE_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  const std::string alloc = capture(stream, [](cudaStream_t) {
    const Tensor scratch = Tensor::empty({1 << 20}, DType::kUInt8, Device::cuda(0));
    (void)scratch;
  }, &graph);
  EXPECT_NE(alloc, "") << "an allocation inside the capture went unnoticed";
  const std::string sync =
      capture(stream, [](cudaStream_t s) { core::cuda_stream_sync(s); }, &graph);
  EXPECT_NE(sync, "") << "a host synchronisation inside the capture went unnoticed";
  // The stream is usable afterwards.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_OK(cudaStreamIsCapturing(stream, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
