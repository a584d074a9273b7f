// Times one prepared layer for MoeArgs::autotune: CUDA events on the caller's stream for CUDA
// devices (the one place autotune touches the runtime), steady_clock for the CPU engine, whose
// launches run synchronously on the calling thread.
#include <chrono>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "stepfun/autotune.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#endif

namespace cakemoe {
namespace stepfun {
namespace autotune {
namespace {

#if defined(CAKEMOE_WITH_CUDA)
/// A pair of timing events released on every path out (a failed launch throws).
class EventPair {
 public:
  EventPair() {
    CAKEMOE_CUDA_CHECK(cudaEventCreate(&start));
    if (cudaEventCreate(&stop) != cudaSuccess) {
      cudaEventDestroy(start);
      throw CudaError("cudaEventCreate", "could not create the autotune timing event");
    }
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
};

double time_on_gpu(const StepFunMoeLaunch& launch, Stream stream, int reps) {
  const auto s = static_cast<cudaStream_t>(stream);
  EventPair events;
  launch.launch(stream);  // warm-up: first-launch costs (module load, PTX JIT) stay out
  CAKEMOE_CUDA_CHECK(cudaEventRecord(events.start, s));
  for (int i = 0; i < reps; ++i) launch.launch(stream);
  CAKEMOE_CUDA_CHECK(cudaEventRecord(events.stop, s));
  CAKEMOE_CUDA_CHECK(cudaEventSynchronize(events.stop));
  float ms = 0;
  CAKEMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
  return 1000.0 * static_cast<double>(ms) / reps;
}
#else
[[noreturn]] double time_on_gpu(const StepFunMoeLaunch&, Stream, int) {
  throw Unsupported("device", "this build of cakemoe has no CUDA support (CAKEMOE_WITH_CUDA=OFF)");
}
#endif

double time_on_cpu(const StepFunMoeLaunch& launch, int reps) {
  using Clock = std::chrono::steady_clock;
  launch.launch();  // warm-up, as on the GPU
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < reps; ++i) launch.launch();
  const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;
  return elapsed.count() / reps;
}

}  // namespace

double time_launch_us(const StepFunMoeLaunch& launch, Device device, Stream stream, int reps) {
  core::require(reps >= 1, "autotune_reps", "must be >= 1");
  if (device.type == DeviceType::kCUDA) return time_on_gpu(launch, stream, reps);
  return time_on_cpu(launch, reps);
}

}  // namespace autotune
}  // namespace stepfun
}  // namespace cakemoe
