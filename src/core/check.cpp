#include "core/check.h"

#include <algorithm>
#include <sstream>

#include "core/checked.h"

namespace cakemoe {
namespace core {

std::string device_string(Device device) {
  return device.type == DeviceType::kCPU ? std::string("cpu")
                                         : "cuda:" + std::to_string(device.index);
}

std::string shape_string(std::initializer_list<int64_t> shape) {
  std::ostringstream os;
  os << "[";
  bool first = true;
  for (int64_t s : shape) {
    os << (first ? "" : ", ");
    if (s < 0)
      os << "*";
    else
      os << s;
    first = false;
  }
  os << "]";
  return os.str();
}

void check_view(const TensorView& t, const std::string& arg) {
  require(t.ndim >= 0 && t.ndim <= TensorView::kMaxDims, arg,
          "must have 0.." + std::to_string(TensorView::kMaxDims) + " dimensions, got ndim " +
              std::to_string(t.ndim));
  require(static_cast<unsigned>(t.dtype) <= static_cast<unsigned>(DType::kInt64), arg,
          "has an invalid dtype value " + std::to_string(static_cast<unsigned>(t.dtype)));
  require((t.device.type == DeviceType::kCPU || t.device.type == DeviceType::kCUDA) &&
              t.device.index >= 0,
          arg, "has an invalid device");
  int64_t numel = 1, last_offset = 0;
  for (int d = 0; d < t.ndim; ++d) {
    require(t.shape[d] >= 0, arg,
            "dimension " + std::to_string(d) + " is negative (" + std::to_string(t.shape[d]) + ")");
    require(t.strides[d] >= 0, arg,
            "stride " + std::to_string(d) + " is negative (" + std::to_string(t.strides[d]) +
                "); negative strides are not supported");
    numel = checked_mul(numel, t.shape[d], arg, "numel");
  }
  if (t.ndim == 0) numel = t.data != nullptr ? 1 : 0;  // a scalar, or the absent view
  if (numel > 0) {
    for (int d = 0; d < t.ndim; ++d) {
      last_offset = checked_add(
          last_offset, checked_mul(t.shape[d] - 1, t.strides[d], arg, "the addressed span"), arg,
          "the addressed span");
    }
    const int64_t elem_bytes = static_cast<int64_t>(dtype_size(t.dtype));
    checked_mul(checked_add(std::max(numel, last_offset), 1, arg, "the byte size"), elem_bytes, arg,
                "the byte size");
    require(t.data != nullptr, arg, "has a shape " + t.describe() + " but no data (null pointer)");
  }
}

void check_defined(const TensorView& t, const std::string& arg) {
  require(t.defined(), arg, "is required");
  check_view(t, arg);
}

void check_given(std::initializer_list<NamedView> views) {
  for (const NamedView& v : views) {
    if (v.view.defined()) check_view(v.view, v.arg);
  }
}

void check_absent(const TensorView& t, const std::string& arg, const std::string& why) {
  require(!t.defined(), arg, "must not be given: " + why);
}

void check_dtype(const TensorView& t, const std::string& arg,
                 std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t.dtype == d) return;
  }
  std::string names;
  for (DType d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  throw InvalidArgument(arg, "dtype must be " + names + ", got " + dtype_name(t.dtype));
}

void check_shape(const TensorView& t, const std::string& arg,
                 std::initializer_list<int64_t> shape) {
  check_view(t, arg);
  bool ok = t.ndim == static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) {
    if (ok && s >= 0 && t.shape[d] != s) ok = false;
    ++d;
  }
  require(ok, arg, "shape must be " + shape_string(shape) + ", got " + t.describe());
}

void check_ndim(const TensorView& t, const std::string& arg, int ndim) {
  check_view(t, arg);
  require(t.ndim == ndim, arg,
          "must have " + std::to_string(ndim) + " dimensions, got " + t.describe());
}

void check_contiguous(const TensorView& t, const std::string& arg) {
  check_view(t, arg);
  require(t.is_contiguous(), arg,
          "must be contiguous (row-major), got " + t.describe() + " with non-contiguous strides");
}

void check_device(const TensorView& t, const std::string& arg, Device device) {
  if (t.device == device) return;
  throw InvalidArgument(arg, "must be on " + device_string(device) +
                                 " like the other operands, got " + device_string(t.device));
}

void check_vector(const TensorView& t, const std::string& arg, int64_t size) {
  check_view(t, arg);
  require(t.ndim == 1 && t.shape[0] == size, arg,
          "shape must be [" + std::to_string(size) + "], got " + t.describe());
}

void check_min_numel(const TensorView& t, const std::string& arg, int64_t min_numel) {
  check_view(t, arg);
  require(t.numel() >= min_numel, arg,
          "needs at least " + std::to_string(min_numel) + " elements, got " + t.describe());
}

void check_operand(const TensorView& t, const std::string& arg,
                   std::initializer_list<DType> allowed, Device device) {
  check_defined(t, arg);
  check_dtype(t, arg, allowed);
  check_contiguous(t, arg);
  check_device(t, arg, device);
}

}  // namespace core
}  // namespace cakemoe
