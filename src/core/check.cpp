#include "core/check.h"

#include <sstream>

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

void check_defined(const TensorView& t, const std::string& arg) {
  require(t.defined(), arg, "is required");
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
  bool ok = t.ndim == static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) {
    if (ok && s >= 0 && t.shape[d] != s) ok = false;
    ++d;
  }
  require(ok, arg, "shape must be " + shape_string(shape) + ", got " + t.describe());
}

void check_ndim(const TensorView& t, const std::string& arg, int ndim) {
  require(t.ndim == ndim, arg,
          "must have " + std::to_string(ndim) + " dimensions, got " + t.describe());
}

void check_contiguous(const TensorView& t, const std::string& arg) {
  require(t.is_contiguous(), arg,
          "must be contiguous (row-major), got " + t.describe() + " with non-contiguous strides");
}

void check_device(const TensorView& t, const std::string& arg, Device device) {
  if (t.device == device) return;
  throw InvalidArgument(arg, "must be on " + device_string(device) +
                                 " like the other operands, got " + device_string(t.device));
}

void check_min_numel(const TensorView& t, const std::string& arg, int64_t min_numel) {
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
