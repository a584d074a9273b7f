// CudaPlan (spec bgmv §8): graph capture on a private side stream, owner-stream replay, outer
// capture passthrough, close().
#include "bgmv/cuda_plan.h"

#include "bgmv/cuda_plan_launch.h"
#include "cakemoe/errors.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "core/cuda_util.h"
#endif

namespace cakemoe {
namespace bgmv {

#if defined(CAKEMOE_WITH_CUDA)

namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

/// Makes `index` the current device for a scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    CAKEMOE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) CAKEMOE_CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

CudaPlan::CudaPlan(int device_index) : device_index_(device_index) {}

CudaPlan::~CudaPlan() {
  try {
    close();
  } catch (...) {  // NOTE: a destructor must not throw; a failed sync leaves nothing to free
  }
}

void CudaPlan::set_launch(std::unique_ptr<Launch> launch) { launch_ = std::move(launch); }

void CudaPlan::enqueue(Stream stream) const {
  const Launch& l = *launch_;
  switch (l.path) {
    case CudaPath::kCakePerRoute:
      if (l.order_remap) l.order_launcher(l.order, stream);
      launch_cake_shrink(l.cake, stream);
      launch_cake_expand(l.cake, stream);
      break;
    case CudaPath::kCakeGrouped:
      l.grouped_launcher(l.grouped, stream);
      break;
    case CudaPath::kPortable:
      launch_portable(l.portable, stream);
      break;
    case CudaPath::kCakeSpecialized:
      l.specialized_launcher(l.cake, stream);
      break;
  }
}

void CudaPlan::run(Stream stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  DeviceGuard device(device_index_);
  if (core::cuda_stream_capturing(stream)) {
    enqueue(stream);  // spec §8: inside an outer capture, no inner graph
    return;
  }
  if (graph_exec_ == nullptr) {
    cudaStream_t side = nullptr;
    CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    side_stream_ = side;
    // The side stream starts after the caller's pending work; the capture itself has no
    // cross-stream edge.
    cudaEvent_t ready = nullptr;
    CAKEMOE_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    cudaError_t status = cudaEventRecord(ready, as_stream(stream));
    if (status == cudaSuccess) status = cudaStreamWaitEvent(side, ready, 0);
    if (status == cudaSuccess) status = cudaStreamSynchronize(side);
    cudaEventDestroy(ready);
    CAKEMOE_CUDA_CHECK(status);
    CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(side, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(side);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(side, &broken);
      if (broken != nullptr) cudaGraphDestroy(broken);
      destroy_graph();
      throw;
    }
    cudaGraph_t graph = nullptr;
    CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(side, &graph));
    graph_ = graph;
    cudaGraphExec_t exec = nullptr;
    status = cudaGraphInstantiate(&exec, graph, 0);
    if (status != cudaSuccess) destroy_graph();
    CAKEMOE_CUDA_CHECK(status);
    graph_exec_ = exec;
    owner_ = stream;
  } else if (stream != owner_) {
    throw InvalidArgument("stream",
                          "a BGMV plan must replay on its original CUDA stream (the "
                          "stream of its first run); call close() to rebind");
  }
  CAKEMOE_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec_), as_stream(stream)));
}

void CudaPlan::close() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (graph_exec_ != nullptr) {
    DeviceGuard device(device_index_);
    const cudaError_t status = cudaStreamSynchronize(as_stream(owner_));
    destroy_graph();
    CAKEMOE_CUDA_CHECK(status);
    return;
  }
  destroy_graph();
}

void CudaPlan::destroy_graph() noexcept {
  if (graph_exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  if (side_stream_ != nullptr) cudaStreamDestroy(as_stream(side_stream_));
  graph_exec_ = nullptr;
  graph_ = nullptr;
  side_stream_ = nullptr;
  owner_ = nullptr;
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw Unsupported("device", "this build of cakemoe has no CUDA support (CAKEMOE_WITH_CUDA=OFF)");
}
}  // namespace

CudaPlan::CudaPlan(int device_index) : device_index_(device_index) {}
CudaPlan::~CudaPlan() = default;
void CudaPlan::set_launch(std::unique_ptr<Launch> launch) { launch_ = std::move(launch); }
void CudaPlan::enqueue(Stream) const { no_cuda(); }
void CudaPlan::run(Stream) { no_cuda(); }
void CudaPlan::close() {}
void CudaPlan::destroy_graph() noexcept {}

#endif

}  // namespace bgmv
}  // namespace cakemoe
