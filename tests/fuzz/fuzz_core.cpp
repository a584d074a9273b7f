// Core entries: TensorView constructors and helpers, Tensor::empty and allocators, dtype helpers,
// and the default-constructed handles (StepFunStageLaunch, StepFunMoeLaunch, BgmvPlan).
#include <cstring>
#include <sstream>
#include <vector>

#include "cakemoe/bgmv.h"
#include "cakemoe/stepfun.h"
#include "cakemoe/tensor.h"
#include "fuzz_entries.h"

namespace cakemoe {
namespace fuzz {

namespace {

void use_name(const char* name) {
  std::ostringstream os;
  os << (name != nullptr ? name : "<null>") << std::strlen(name != nullptr ? name : "");
}

Device read_device(FuzzInput& in) {
  Device d;
  d.type = in.byte() < 0xF0 ? DeviceType::kCPU : in.any_enum<DeviceType>();
  d.index = static_cast<int8_t>(in.byte());
  return d;
}

void use_helpers(FuzzInput& in, const TensorView& v) {
  std::ostringstream os;
  os << v.defined() << v.numel() << v.nbytes() << v.is_contiguous() << v.describe()
     << v.sizes().size();
  const int dim = static_cast<int8_t>(in.byte());
  os << (in.flag() ? v.size(dim) : v.stride(dim));
}

}  // namespace

// ctor kind (0 init-list, 1 shape, 2 shape + strides, 3 raw fields), ndim byte, dims, [strides],
// dtype, device, data flag, then the helpers with a dim byte.
void fuzz_tensor_view(FuzzInput& in, Arena&) {
  static uint64_t backing[8];
  const int kind = in.byte() % 4;
  const int ndim = kind == 3 ? static_cast<int8_t>(in.byte()) : in.byte() % 9;
  std::vector<int64_t> shape, strides;
  const int count = ndim < 0 ? 0 : (ndim > 8 ? 8 : ndim);
  for (int d = 0; d < count; ++d) shape.push_back(in.dim());
  if (kind == 2) {
    const int stride_count = in.flag() ? in.byte() % 9 : count;
    for (int d = 0; d < stride_count; ++d) strides.push_back(in.dim());
  }
  const DType dtype = in.any_enum<DType>();
  const Device device = read_device(in);
  void* data = in.flag() ? nullptr : backing;
  TensorView v;
  switch (kind) {
    case 0:
      switch (count) {
        case 0:
          v = TensorView(data, dtype, std::initializer_list<int64_t>{}, device);
          break;
        case 1:
          v = TensorView(data, dtype, {shape[0]}, device);
          break;
        case 2:
          v = TensorView(data, dtype, {shape[0], shape[1]}, device);
          break;
        default:
          v = TensorView(data, dtype, {shape[0], shape[1], shape[2]}, device);
          break;
      }
      break;
    case 1:
      v = TensorView(data, dtype, shape, device);
      break;
    case 2:
      v = TensorView(data, dtype, shape, strides, device);
      break;
    default:
      // A hostile caller writes the public fields directly.
      v.data = data;
      v.dtype = dtype;
      v.device = device;
      v.ndim = ndim;
      for (int d = 0; d < count && d < TensorView::kMaxDims; ++d) {
        v.shape[d] = shape[d];
        v.strides[d] = in.dim();
      }
      break;
  }
  use_helpers(in, v);
}

// ndim (byte % 8), dims, dtype, device, allocator choice, then a dim byte for size(); also
// dtype_size / dtype_name of any value and a small host allocation.
void fuzz_tensor_empty(FuzzInput& in, Arena&) {
  const int ndim = in.byte() % 8;
  std::vector<int64_t> shape;
  for (int d = 0; d < ndim; ++d) shape.push_back(in.dim());
  const DType dtype = in.any_enum<DType>();
  const Device device = read_device(in);
  Allocator* allocator = nullptr;
  switch (in.byte() % 4) {
    case 1:
      allocator = host_allocator();
      break;
    case 2:
      allocator = default_allocator(device);
      break;
    case 3:
      allocator = cuda_allocator(device.index);
      break;
    default:
      break;
  }
  use_name(dtype_name(dtype));
  // Valid shapes beyond the real-memory cap would only test the allocator: skip those. Invalid
  // ones (negative dims, overflowing sizes) must be rejected, so they are passed on.
  bool valid = ndim <= TensorView::kMaxDims;
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes)) valid = false;
  }
  if (valid && bytes > Arena::kRealBytesCap) return;
  const Tensor tensor = Tensor::empty(shape, dtype, device, allocator);
  std::ostringstream os;
  os << tensor.defined() << tensor.numel() << tensor.nbytes() << tensor.dim()
     << (tensor.data() != nullptr) << static_cast<int>(tensor.dtype()) << tensor.device().index;
  const Tensor copy = tensor;
  os << copy.view().describe() << copy.size(static_cast<int8_t>(in.byte()));
}

// An op byte: launch a default StepFunStageLaunch; launch / outputs / plan of a default
// StepFunMoeLaunch; run / close / accessors of a default BgmvPlan; swap the warning hook.
void fuzz_handles(FuzzInput& in, Arena&) {
  std::ostringstream os;
  switch (in.byte() % 4) {
    case 0:
      stepfun::StepFunStageLaunch().launch(any_stream(in));
      break;
    case 1: {
      const stepfun::StepFunMoeLaunch launch;
      switch (in.byte() % 3) {
        case 0:
          launch.launch(any_stream(in));
          break;
        case 1:
          os << launch.outputs().size();
          break;
        default:
          os << launch.plan();
          break;
      }
      break;
    }
    case 2: {
      bgmv::BgmvPlan plan;
      switch (in.byte() % 5) {
        case 0:
          plan.run(any_stream(in));
          break;
        case 1:
          plan.close();
          break;
        case 2:
          os << plan.backend_used() << plan.variant() << plan.fallback_reason();
          break;
        case 3:
          os << plan.grouped() << plan.order_remap() << plan.pdl_mode();
          break;
        default:
          os << plan.y_accum().numel() << plan.x().numel();
          break;
      }
      break;
    }
    default: {
      // Install a hook (or the default), then restore the silent one the fuzzer runs with.
      bgmv::WarningHook previous =
          bgmv::set_warning_hook(in.flag() ? bgmv::WarningHook() : [](const std::string&) {});
      bgmv::set_warning_hook(previous);
      break;
    }
  }
}

}  // namespace fuzz
}  // namespace cakemoe
