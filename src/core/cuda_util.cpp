#include "core/cuda_util.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "cakemoe/errors.h"
#include "core/check.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#endif

namespace cakemoe {
namespace core {

#if defined(CAKEMOE_WITH_CUDA)

namespace {
cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }
}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

int cuda_capability(int device_index) {
  int major = 0, minor = 0;
  CAKEMOE_CUDA_CHECK(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index));
  CAKEMOE_CUDA_CHECK(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_index));
  return major * 10 + minor;
}

int cuda_sm_count(int device_index) {
  int count = 0;
  CAKEMOE_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device_index));
  return count;
}

bool kernel_waits_for_dependencies(const void* kernel) {
  static std::mutex mutex;
  static std::unordered_map<const void*, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(kernel);
  if (it != known.end()) return it->second;
  cudaFuncAttributes attributes{};
  CAKEMOE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  // NOTE: ptxVersion is the virtual architecture the loaded code came from (80 for a JIT of the
  // compute_80 PTX, 90 for sm_90a SASS); griddepcontrol is compiled in from 90 on.
  return known[kernel] = attributes.ptxVersion >= 90;
}

bool cuda_stream_capturing(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CAKEMOE_CUDA_CHECK(cudaStreamIsCapturing(as_stream(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

void cuda_stream_sync(Stream stream) {
  CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
}

void copy_tensor(const TensorView& dst, const TensorView& src, Stream stream) {
  require(dst.dtype == src.dtype && dst.numel() == src.numel(), "dst",
          "must match src in dtype and element count (" + src.describe() + " -> " + dst.describe() +
              ")");
  check_contiguous(dst, "dst");
  check_contiguous(src, "src");
  if (dst.device.type == DeviceType::kCPU && src.device.type == DeviceType::kCPU) {
    std::memcpy(dst.data, src.data, src.nbytes());  // no driver needed (CI has none)
    return;
  }
  CAKEMOE_CUDA_CHECK(
      cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDefault, as_stream(stream)));
}

Tensor copy_to(const TensorView& src, Device device) {
  Tensor out = Tensor::empty(src.sizes(), src.dtype, device);
  copy_tensor(out, src, nullptr);
  if (device.type != DeviceType::kCPU || src.device.type != DeviceType::kCPU) {
    CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  return out;
}

void fill_bytes(const TensorView& t, int byte, Stream stream) {
  if (t.device.type == DeviceType::kCPU) {
    std::memset(t.data, byte, t.nbytes());
    return;
  }
  CAKEMOE_CUDA_CHECK(cudaMemsetAsync(t.data, byte, t.nbytes(), as_stream(stream)));
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw Unsupported("device", "this build of cakemoe has no CUDA support (CAKEMOE_WITH_CUDA=OFF)");
}
}  // namespace

int cuda_device_count() { return 0; }
int cuda_capability(int) { no_cuda(); }
int cuda_sm_count(int) { no_cuda(); }
bool cuda_native_code_loads(int) { no_cuda(); }
bool kernel_waits_for_dependencies(const void*) { return false; }
bool cuda_stream_capturing(Stream) { return false; }
void cuda_stream_sync(Stream) {}
void copy_tensor(const TensorView& dst, const TensorView& src, Stream) {
  require(dst.device.type == DeviceType::kCPU && src.device.type == DeviceType::kCPU, "device",
          "a build without CUDA copies host tensors only");
  require(dst.dtype == src.dtype && dst.numel() == src.numel(), "dst", "must match src");
  std::memcpy(dst.data, src.data, src.nbytes());
}
Tensor copy_to(const TensorView& src, Device device) {
  Tensor out = Tensor::empty(src.sizes(), src.dtype, device);
  copy_tensor(out, src, nullptr);
  return out;
}
void fill_bytes(const TensorView& t, int byte, Stream) {
  require(t.device.type == DeviceType::kCPU, "device",
          "a build without CUDA fills host tensors only");
  std::memset(t.data, byte, t.nbytes());
}

#endif

void zero_synchronously(const std::vector<Tensor>& tensors) {
  bool on_cuda = false;
  for (const Tensor& t : tensors) {
    fill_bytes(t, 0, nullptr);
    on_cuda = on_cuda || t.device().type == DeviceType::kCUDA;
  }
  if (on_cuda) cuda_stream_sync(nullptr);
}

}  // namespace core
}  // namespace cakemoe
