// Host round trip of the public preparation for CUDA inputs (see device_prep.h).
#include "stepfun/device_prep.h"

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/cuda_util.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#endif

namespace cakemoe {
namespace stepfun {
void require_device_memory(const TensorView& t, const std::string& arg, const char* what) {
  const Device d = t.device;
  if (d.index < 0 || d.index >= core::cuda_device_count()) {
    throw Unsupported(arg, std::string(what) + " on device " + core::device_string(d) +
                               " needs a CUDA build of cakemoe and that device visible; pass "
                               "CPU tensors to use the reference engine");
  }
#if defined(CAKEMOE_WITH_CUDA)
  cudaPointerAttributes attributes{};
  CAKEMOE_CUDA_CHECK(cudaPointerGetAttributes(&attributes, t.data));
  const bool on_device = (attributes.type == cudaMemoryTypeDevice ||
                          attributes.type == cudaMemoryTypeManaged) &&
                         attributes.device == d.index;
  if (!on_device) {
    throw InvalidArgument(arg, "is labelled " + core::device_string(d) +
                                   " but its pointer is not memory of that device");
  }
#endif
}

Tensor to_host(const TensorView& t) { return core::copy_to(t, Device::cpu()); }

Tensor to_device_of(const Tensor& host, Device device) {
  if (!host.defined()) return host;
  return core::copy_to(host, device);
}

}  // namespace stepfun
}  // namespace cakemoe
