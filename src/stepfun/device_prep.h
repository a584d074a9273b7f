// Host round trip used by the public weight / activation preparation for CUDA inputs: the inputs
// are copied to the host, the CPU reference prepares them and the results go back to the device.
#pragma once

#include <string>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace stepfun {

/// `t` claims a CUDA device: this build must have CUDA and that device must exist (Unsupported
/// naming `arg` and the device otherwise), and its pointer must be memory of that device
/// (InvalidArgument otherwise).
void require_device_memory(const TensorView& t, const std::string& arg, const char* what);
/// Synchronous contiguous copy of a device tensor to the host.
Tensor to_host(const TensorView& t);
/// Synchronous copy of a host tensor to `device`; an undefined tensor stays undefined.
Tensor to_device_of(const Tensor& host, Device device);

}  // namespace stepfun
}  // namespace cakemoe
