// Helpers shared by the GPU suite (label gpu): skipping without a device, host<->device copies,
// byte comparisons naming the first mismatch, graph capture and replay.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "cakemoe/tensor.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"

/// Skips the current test (and says why) when no CUDA device is visible.
#define CAKEMOE_REQUIRE_GPU()                                                        \
  do {                                                                               \
    if (::cakemoe::core::cuda_device_count() == 0) {                                 \
      GTEST_SKIP() << "no CUDA device visible: GPU test skipped (run it on the H200)"; \
    }                                                                                \
  } while (0)

namespace cakemoe {
namespace gpu_testbed {

/// Waits for `stream` like cudaStreamSynchronize, but a kernel that is still running after
/// `seconds` is reported as hung (stderr names `what`) and the process exits with status 3: a hung
/// kernel cannot be recovered from, and a test run must not wait on it until its own time limit.
/// CAKEMOE_GPU_HANG_SCALE (a positive number, default 1) multiplies `seconds`: compute-sanitizer
/// slows kernels 10-100x (scripts/gpu-sanitize.sh sets it).
void sync_or_exit(cudaStream_t stream, const std::string& what, double seconds = 30.0);

/// Synchronous copies between the host and device 0.
inline Tensor to_device(const TensorView& host) { return core::copy_to(host, Device::cuda(0)); }
inline Tensor to_host(const TensorView& device) { return core::copy_to(device, Device::cpu()); }

/// "" when the first `bytes` bytes of host buffers a and b are equal, else where they first differ
/// (element index in `element_bytes` units, both values in hex) and how many elements differ.
std::string diff_bytes(const void* a, const void* b, size_t bytes, size_t element_bytes);
/// Device view vs host view of the same shape: diff_bytes of their contents.
std::string diff_device_host(const TensorView& device, const TensorView& host);
/// True when `device` (a CUDA tensor) holds exactly the bytes of `expected` (a CPU tensor);
/// otherwise records a failure naming `what` and the diff_device_host text.
inline bool expect_same_bytes(const std::string& what, const TensorView& expected,
                              const TensorView& device) {
  const std::string diff = diff_device_host(device, expected);
  if (diff.empty()) return true;
  ADD_FAILURE() << what << ": " << diff;
  return false;
}

/// Captures `enqueue(stream)` into a graph in global mode (an allocation or a host sync inside
/// fails the capture), replays the graph `replays` times on `stream` and waits for it.
template <typename Enqueue>
void capture_and_replay(cudaStream_t stream, const Enqueue& enqueue, int replays = 1) {
  cudaGraph_t graph = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  enqueue(stream);
  CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < replays; ++i) CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  core::cuda_stream_sync(stream);
  CAKEMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  CAKEMOE_CUDA_CHECK(cudaGraphDestroy(graph));
}

}  // namespace gpu_testbed
}  // namespace cakemoe
