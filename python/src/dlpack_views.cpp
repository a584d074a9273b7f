#include "dlpack_views.h"

#include <vector>

#include "cakemoe/errors.h"

namespace nb = nanobind;

namespace cakemoe {
namespace python {
namespace {

using nb::dlpack::dtype_code;

struct DTypeCode {
  DType dtype;
  dtype_code code;
  uint8_t bits;
};

// NOTE: the 8-bit float types travel as uint8 (the library takes uint8 bytes for each of them,
// and not every DLPack producer has the float8 codes); uint16 carries bf16 bits from numpy.
constexpr DTypeCode kCodes[] = {
    {DType::kBF16, dtype_code::Bfloat, 16}, {DType::kBF16, dtype_code::UInt, 16},
    {DType::kFP16, dtype_code::Float, 16},  {DType::kFP32, dtype_code::Float, 32},
    {DType::kUInt8, dtype_code::UInt, 8},   {DType::kInt32, dtype_code::Int, 32},
    {DType::kInt64, dtype_code::Int, 64},
};

std::string describe(nb::dlpack::dtype d) {
  static const char* const kNames[] = {"int",    "uint",    "float", "opaque",
                                       "bfloat", "complex", "bool"};
  const std::string name = d.code < 7 ? kNames[d.code] : "code" + std::to_string(d.code);
  return name + std::to_string(d.bits) + (d.lanes == 1 ? "" : "x" + std::to_string(d.lanes));
}

Device to_device(int device_type, int device_id, const std::string& argument) {
  if (device_type == nb::device::cpu::value) return Device::cpu();
  if (device_type == nb::device::cuda::value) return Device::cuda(device_id);
  throw InvalidArgument(argument, "must be a CPU or CUDA tensor, got DLPack device type " +
                                      std::to_string(device_type));
}

}  // namespace

TensorView to_view(const AnyArray& array, const std::string& argument) {
  const nb::dlpack::dtype d = array.dtype();
  const DTypeCode* match = nullptr;
  for (const DTypeCode& c : kCodes) {
    if (static_cast<uint8_t>(c.code) == d.code && c.bits == d.bits && d.lanes == 1) match = &c;
  }
  if (match == nullptr) {
    throw InvalidArgument(argument, "has an element type cakemoe does not take: " + describe(d));
  }
  const size_t ndim = array.ndim();
  if (ndim == 0 || ndim > static_cast<size_t>(TensorView::kMaxDims)) {
    throw InvalidArgument(argument, "must have 1 to " + std::to_string(TensorView::kMaxDims) +
                                        " dimensions, got " + std::to_string(ndim));
  }
  std::vector<int64_t> shape(ndim), strides(ndim);
  bool empty = false;
  for (size_t i = 0; i < ndim; ++i) {
    shape[i] = static_cast<int64_t>(array.shape(i));
    empty = empty || shape[i] == 0;
  }
  int64_t contiguous = 1;
  for (size_t i = ndim; i-- > 0;) {
    // NOTE: DLPack allows a null stride array for compact row-major data. The stride of a size-1
    // dimension, and every stride of an empty array, address nothing: producers write anything
    // there (numpy gives 0-row arrays zero strides), so they are normalised to row-major.
    const bool free_stride = array.stride_ptr() == nullptr || shape[i] == 1 || empty;
    strides[i] = free_stride ? contiguous : array.stride(i);
    if (__builtin_mul_overflow(contiguous, shape[i], &contiguous)) {
      throw InvalidArgument(argument, "has more elements than an int64 can count");
    }
  }
  return TensorView(const_cast<void*>(array.data()), match->dtype, shape, strides,
                    to_device(array.device_type(), array.device_id(), argument));
}

nb::ndarray<nb::array_api> from_view(const TensorView& view, nb::handle owner,
                                     bool bf16_as_uint16) {
  nb::dlpack::dtype d{};
  d.lanes = 1;
  for (const DTypeCode& c : kCodes) {
    if (c.dtype == view.dtype && d.bits == 0) {
      d.code = static_cast<uint8_t>(c.code);
      d.bits = c.bits;
    }
  }
  if (view.dtype == DType::kBF16 && bf16_as_uint16) d.code = static_cast<uint8_t>(dtype_code::UInt);
  if (dtype_size(view.dtype) == 1 && d.bits == 0) {  // e4m3, ue8m0, e2m1x2: their bytes
    d.code = static_cast<uint8_t>(dtype_code::UInt);
    d.bits = 8;
  }
  if (d.bits == 0) {
    throw Unsupported("dtype", std::string("no DLPack code for ") + dtype_name(view.dtype));
  }
  std::vector<size_t> shape(view.ndim);
  for (int i = 0; i < view.ndim; ++i) shape[i] = static_cast<size_t>(view.shape[i]);
  const bool cuda = view.device.type == DeviceType::kCUDA;
  return nb::ndarray<nb::array_api>(
      view.data, static_cast<size_t>(view.ndim), shape.data(), owner, view.strides, d,
      cuda ? nb::device::cuda::value : nb::device::cpu::value, cuda ? view.device.index : 0);
}

}  // namespace python
}  // namespace cakemoe
