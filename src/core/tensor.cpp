#include "cakemoe/tensor.h"

#include <cstdlib>
#include <sstream>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/checked.h"

namespace cakemoe {
namespace {

void fill_contiguous_strides(TensorView& v) {
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride = core::checked_mul(stride, v.shape[d], "shape", "numel");
  }
}

void set_shape(TensorView& v, const int64_t* shape, size_t ndim) {
  if (ndim > static_cast<size_t>(TensorView::kMaxDims)) {
    throw InvalidArgument("shape", "at most 6 dimensions are supported");
  }
  v.ndim = static_cast<int>(ndim);
  for (size_t d = 0; d < ndim; ++d) {
    if (shape[d] < 0) throw InvalidArgument("shape", "dimensions must be non-negative");
    v.shape[d] = shape[d];
  }
}

}  // namespace

TensorView::TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> shape_,
                       Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  set_shape(*this, shape_.begin(), shape_.size());
  fill_contiguous_strides(*this);
}

TensorView::TensorView(void* data_, DType dtype_, const std::vector<int64_t>& shape_,
                       Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  set_shape(*this, shape_.data(), shape_.size());
  fill_contiguous_strides(*this);
}

TensorView::TensorView(void* data_, DType dtype_, const std::vector<int64_t>& shape_,
                       const std::vector<int64_t>& strides_, Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  if (strides_.size() != shape_.size()) {
    throw InvalidArgument("strides", "must have one entry per dimension");
  }
  set_shape(*this, shape_.data(), shape_.size());
  for (size_t d = 0; d < strides_.size(); ++d) strides[d] = strides_[d];
}

int64_t TensorView::size(int dim) const {
  const int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim)
    throw InvalidArgument("dim", "out of range for a " + describe() + " tensor");
  return shape[d];
}

int64_t TensorView::stride(int dim) const {
  const int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim)
    throw InvalidArgument("dim", "out of range for a " + describe() + " tensor");
  return strides[d];
}

int64_t TensorView::numel() const {
  // NOTE: the fields are public, so a view may hold anything; entry points reject such views by
  // argument name (core::check_view) before they get here, this is the backstop.
  if (ndim < 0 || ndim > kMaxDims) throw InvalidArgument("shape", "ndim must lie in [0, 6]");
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] < 0) throw InvalidArgument("shape", "dimensions must be non-negative");
    n = core::checked_mul(n, shape[d], "shape", "numel");
  }
  return ndim == 0 ? (data ? 1 : 0) : n;
}

size_t TensorView::nbytes() const {
  return static_cast<size_t>(
      core::checked_mul(numel(), static_cast<int64_t>(dtype_size(dtype)), "shape", "nbytes"));
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    if (__builtin_mul_overflow(expected, shape[d], &expected)) return false;
  }
  return true;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << "] " << dtype_name(dtype) << " " << core::device_string(device);
  return os.str();
}

// ---- Allocators
// ----------------------------------------------------------------------------------

namespace {

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p)
      throw InvalidArgument("bytes", "host allocation of " + std::to_string(bytes) + " failed");
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  Device device() const override { return Device::cpu(); }
};

}  // namespace

Allocator* host_allocator() {
  static HostAllocator* allocator = new HostAllocator;  // never destroyed (see cuda_allocator)
  return allocator;
}

Allocator* default_allocator(Device device) {
  return device.type == DeviceType::kCPU ? host_allocator() : cuda_allocator(device.index);
}

Tensor Tensor::empty(const std::vector<int64_t>& shape, DType dtype, Device device,
                     Allocator* allocator) {
  if (!allocator) allocator = default_allocator(device);
  if (allocator->device() != device) {
    throw InvalidArgument("allocator", "must allocate on the requested device");
  }
  Tensor t;
  TensorView probe(nullptr, dtype, shape, device);
  const size_t bytes = probe.nbytes();
  void* p = allocator->allocate(bytes);
  t.storage_ =
      std::shared_ptr<void>(p, [allocator, bytes](void* q) { allocator->deallocate(q, bytes); });
  t.view_ = TensorView(p, dtype, shape, device);
  return t;
}

}  // namespace cakemoe
