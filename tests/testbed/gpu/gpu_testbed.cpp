#include "testbed/gpu/gpu_testbed.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace cakemoe {
namespace gpu_testbed {

namespace {

/// CAKEMOE_GPU_HANG_SCALE, or 1 when unset or not a positive number.
double hang_scale() {
  const char* v = std::getenv("CAKEMOE_GPU_HANG_SCALE");
  if (v == nullptr) return 1.0;
  char* end = nullptr;
  const double scale = std::strtod(v, &end);
  return end != v && scale > 0.0 ? scale : 1.0;
}

}  // namespace

void sync_or_exit(cudaStream_t stream, const std::string& what, double seconds) {
  seconds *= hang_scale();
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t status = cudaStreamQuery(stream);
    if (status != cudaErrorNotReady) {
      CAKEMOE_CUDA_CHECK(status);
      return;
    }
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() > seconds) {
      std::fprintf(stderr, "HANG: %s still running after %.0f s\n", what.c_str(), seconds);
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::string diff_bytes(const void* a, const void* b, size_t bytes, size_t element_bytes) {
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  if (std::memcmp(pa, pb, bytes) == 0) return "";
  const size_t n = bytes / element_bytes;
  size_t first = n, count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(pa + i * element_bytes, pb + i * element_bytes, element_bytes) == 0) continue;
    if (first == n) first = i;
    ++count;
  }
  std::ostringstream os;
  os << count << " of " << n << " elements differ; first at index " << first << ": 0x";
  for (const unsigned char* p : {pa, pb}) {
    for (size_t j = element_bytes; j-- > 0;) {
      static const char* kHex = "0123456789abcdef";
      os << kHex[p[first * element_bytes + j] >> 4] << kHex[p[first * element_bytes + j] & 15];
    }
    if (p == pa) os << " (gpu) vs 0x";
  }
  os << " (cpu)";
  return os.str();
}

std::string diff_device_host(const TensorView& device, const TensorView& host) {
  if (device.nbytes() != host.nbytes()) {
    return "sizes differ: " + device.describe() + " vs " + host.describe();
  }
  const Tensor copy = core::copy_to(device, Device::cpu());
  return diff_bytes(copy.data(), host.data, host.nbytes(), dtype_size(host.dtype));
}

}  // namespace gpu_testbed
}  // namespace cakemoe
